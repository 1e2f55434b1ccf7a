"""What makes an image unusable for training, shared by the dataset check and the trainer:
the check never passes an image that the trainer then skips."""

from __future__ import annotations

MIN_SIDE = 8  # pixels on the shorter side; anything smaller has no picture left after resizing


def max_pixels() -> int | None:
    """The most pixels Pillow opens: it refuses anything over twice its MAX_IMAGE_PIXELS as a decompression bomb."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    return 2 * int(limit) if limit else None


def size_problem(width: int, height: int) -> str | None:
    """Why an image of this size (as shown) is not trained, or None when it is."""
    if width < MIN_SIDE or height < MIN_SIDE:
        return f"is only {width}x{height} pixels (training needs at least {MIN_SIDE} on each side)"
    limit = max_pixels()
    if limit is not None and width * height > limit:
        return (f"is {width}x{height} ({width * height / 1e6:.0f} megapixels), more than the {limit / 1e6:.0f} "
                "megapixels Pillow opens (it refuses larger images as possible decompression bombs)")
    return None
