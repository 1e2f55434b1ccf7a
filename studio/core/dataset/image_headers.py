"""Which files are training images, and an image's size read from its header (never its pixels)."""

from __future__ import annotations

from pathlib import Path

from studio.core.dataset.image_pixels import shown_size

# .jfif: a JPEG as Chrome and Edge on Windows save a picture from the web.
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jfif", ".png", ".webp", ".bmp"})
# Image files people keep next to their training images that the trainer does not read.
OTHER_IMAGE_EXTENSIONS = frozenset({".gif", ".tif", ".tiff", ".heic", ".heif", ".avif", ".jxl", ".psd"})


def is_image_name(name: str) -> bool:
    """Whether a file name has the extension of an image the trainer reads."""
    dot = name.rfind(".")
    return dot > 0 and name[dot:].lower() in IMAGE_EXTENSIONS


def image_size(path: Path) -> tuple[int, int] | None:
    """(width, height) as the image is shown (EXIF rotation applied), from the header; None if unreadable."""
    from PIL import Image  # Pillow is only needed once sizes are asked for

    try:
        with Image.open(path) as image:
            return shown_size(image)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
