"""Grid thumbnails: made with Pillow in a helper process and kept in a disk cache keyed by path, size and mtime.

The studio runs `thumbnail_worker` in a separate process so that decoding thousands of
images never competes with the window for Python's interpreter lock.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from studio.core.dataset.image_pixels import as_rgb, upright

THUMB_SIZE = 128
# Part of every cache key: raised when thumbnails are drawn differently (2: transparency on white, 16-bit grey
# scaled), so the grid does not keep showing an image as it no longer trains.
RENDERING = 2
# Non-JPEG images past this many pixels are not decoded for a thumbnail (JPEG decodes at 1/8 scale).
MAX_DECODE_PIXELS = 60_000_000

Thumbnail = tuple[int, int, bytes]  # width, height, RGB888 rows


def cache_key(path: Path, size: int = THUMB_SIZE) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    raw = f"{path}|{st.st_size}|{st.st_mtime_ns}|{size}|{RENDERING}".encode("utf-8", "surrogateescape")
    return hashlib.sha1(raw).hexdigest()


def make_thumbnail(path: Path, folder: Path, size: int = THUMB_SIZE) -> Thumbnail | None:
    """The thumbnail of `path` from the cache, or made now and cached; None when the image is unreadable."""
    from PIL import Image

    key = cache_key(path, size)
    if key is None:
        return None
    cached = folder / key[:2] / f"{key}.jpg"
    if cached.exists():
        try:
            with Image.open(cached) as im:
                rgb = im.convert("RGB")
            return rgb.width, rgb.height, rgb.tobytes()
        except (OSError, ValueError, SyntaxError):
            pass  # a damaged cache file is made again below
    try:
        with Image.open(path) as im:
            if im.format != "JPEG" and im.width * im.height > MAX_DECODE_PIXELS:
                return None
            im.draft("RGB", (size * 2, size * 2))
            shown = upright(im)
            shown.thumbnail((size, size))
            rgb = as_rgb(shown)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
        rgb.save(tmp, "JPEG", quality=85)
        os.replace(tmp, cached)
    except OSError:
        pass  # a full or read-only cache only costs the next visit a rebuild
    return rgb.width, rgb.height, rgb.tobytes()


def thumbnail_worker(conn: Any, folder: str, size: int = THUMB_SIZE, nice: int = 10) -> None:
    """Helper-process loop: receives lists of (key, image path), answers with [(key, thumbnail or None)].

    Runs `nice` steps below the window's priority; ends when the studio sends None or goes away.
    """
    if nice and hasattr(os, "nice"):
        os.nice(nice)
    cache = Path(folder)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        answer: list[tuple[str, Thumbnail | None]] = []
        for key, path in request:
            try:
                answer.append((key, make_thumbnail(Path(path), cache, size)))
            except Exception:  # one bad file must not end the helper; it shows as unreadable
                answer.append((key, None))
        try:
            conn.send(answer)
        except (BrokenPipeError, OSError):
            return
