"""One file's facts and the problem record every dataset check reports: an image's header (size as
shown, format, mode; whether it is cut off), read without decoding the pixels."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    severity: Severity
    code: str  # stable name of the rule, e.g. "missing_caption"
    path: str  # the file or folder at fault
    message: str  # what is wrong
    hint: str  # what to do

    def __str__(self) -> str:
        return f"{self.severity}: {self.path}: {self.message} ({self.hint})"


@dataclass
class ImageFacts:
    size: tuple[int, int] | None = None  # as shown, EXIF rotation applied
    format: str | None = None
    mode: str | None = None
    error: str | None = None  # why it cannot be read
    truncated: bool = False


def _tail_is_complete(path: Path, image_format: str | None) -> bool:
    """JPEG files end with an EOI marker and PNG files with an IEND chunk; a cut-off download does not."""
    if image_format not in ("JPEG", "PNG"):
        return True
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 32))
            tail = handle.read()
    except OSError:
        return False
    if image_format == "JPEG":
        return b"\xff\xd9" in tail
    return b"IEND" in tail


def inspect_image(path: Path) -> ImageFacts:
    """Header facts of one image; never decodes the pixels."""
    from PIL import Image

    facts = ImageFacts()
    try:
        if path.stat().st_size == 0:
            facts.error = "the file is empty (0 bytes)"
            return facts
        with Image.open(path) as image:
            width, height = image.size
            facts.format, facts.mode = image.format, image.mode
            try:
                orientation = image.getexif().get(0x0112, 1)
            except Exception:  # a broken EXIF block only loses the rotation
                orientation = 1
        facts.size = (height, width) if orientation in (5, 6, 7, 8) else (width, height)
    except Image.DecompressionBombError:
        return _inspect_huge(path)
    except (OSError, ValueError, SyntaxError) as exc:
        facts.error = f"not a readable image ({exc})"
        return facts
    facts.truncated = not _tail_is_complete(path, facts.format)
    return facts


def _inspect_huge(path: Path) -> ImageFacts:
    """Header of an image past Pillow's decompression-bomb limit: only the header is read, so allow it."""
    from PIL import Image

    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        with Image.open(path) as image:
            return ImageFacts(size=image.size, format=image.format, mode=image.mode)
    except (OSError, ValueError, SyntaxError) as exc:
        return ImageFacts(error=f"not a readable image ({exc})")
    finally:
        Image.MAX_IMAGE_PIXELS = saved
