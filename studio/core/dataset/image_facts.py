"""One file's facts and the problem record every dataset check reports: an image's header (size as
shown, format, mode; whether it is cut off), read without decoding the pixels."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from studio.core.dataset.image_pixels import shown_size

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


def is_cut_off(path: Path, image_format: str | None) -> bool:
    """Whether a JPEG or PNG stops before its picture does (a download or copy cut short): the dataset check
    calls it an error and the trainer skips it, rather than stop the run when the image comes up.

    Its last bytes are read first; only a file without its end marker there is decoded, since phones append
    a video or data of their own after a photo's end (motion photos), and such a photo decodes whole.
    """
    from PIL import Image

    if _tail_is_complete(path, image_format):
        return False
    try:
        with Image.open(path) as image:
            image.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return True
    return False


def inspect_image(path: Path) -> ImageFacts:
    """Header facts of one image; its pixels are decoded only when its end looks cut off."""
    from PIL import Image

    facts = ImageFacts()
    try:
        if path.stat().st_size == 0:
            facts.error = "the file is empty (0 bytes)"
            return facts
        with Image.open(path) as image:
            facts.format, facts.mode = image.format, image.mode
            facts.size = shown_size(image)
    except Image.DecompressionBombError:
        return _inspect_huge(path)
    except (OSError, ValueError, SyntaxError) as exc:
        facts.error = f"not a readable image ({exc})"
        return facts
    facts.truncated = is_cut_off(path, facts.format)
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
