"""An image as a person sees it: turned upright as its EXIF orientation says, and as 8-bit RGB with its
transparent parts on white.

The trainer (images, loss masks, edit pairs' controls), the captioners and the grid's thumbnails read every
image through here, and the scan's and the trainer's sizes use the same orientation, so a photo is bucketed,
cropped, captioned, trained and shown the same way up and on the same background.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

ORIENTATION_TAG = 0x0112
# Greyscale with more than 8 bits (16-bit PNG scans and exports): Pillow's RGB conversion clips every value
# over 255, so such an image trained (and showed) as a white picture.
_WIDE_GREY = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N"})


def orientation(image: Image.Image) -> int:
    """The EXIF orientation (1-8) of an open image; 1 when it has none, an odd value or a broken EXIF block."""
    from PIL import Image

    try:
        if image.format == "PNG" and "exif" not in image.info and not _png_metadata_after_pixels(image):
            # Pillow decodes a whole PNG to look for EXIF after its pixels; there is none, so the chunks
            # before them say all (a dataset check of thousands of PNGs read each picture whole).
            exif = Image.Image.getexif(image)
        else:
            exif = image.getexif()
        value = exif.get(ORIENTATION_TAG, 1)
    except Exception:  # a broken EXIF block only loses the rotation
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _png_metadata_after_pixels(image: Image.Image) -> bool:
    """Whether an unread PNG has a chunk after its first pixel chunk that may hold its orientation (EXIF, text,
    XMP); True when that cannot be told. Only the chunks' 8-byte headers are read."""
    tiles, fp = getattr(image, "tile", None), getattr(image, "fp", None)
    if not tiles or fp is None:
        return True
    start = fp.tell()
    try:
        fp.seek(tiles[0][2] - 8)
        while len(head := fp.read(8)) == 8:
            length, kind = int.from_bytes(head[:4], "big"), head[4:]
            if kind in (b"eXIf", b"tEXt", b"zTXt", b"iTXt"):
                return True
            if kind == b"IEND":
                return False
            fp.seek(length + 4, 1)
        return False  # cut off before its end: what follows is not there to read
    except (OSError, ValueError):
        return True
    finally:
        fp.seek(start)


def shown_size(image: Image.Image) -> tuple[int, int]:
    """(width, height) of an open image as shown, from its header."""
    width, height = image.size
    return (height, width) if orientation(image) in (5, 6, 7, 8) else (width, height)


def upright(image: Image.Image) -> Image.Image:
    """The decoded image turned as its EXIF orientation says (the image itself when it needs no turn).

    Unlike Pillow's exif_transpose this leaves the metadata alone: rewriting a camera's EXIF block fails on
    some photos (a GPS tag stored with an unexpected type), which stopped a run at that image.
    """
    from PIL import Image

    method = {
        2: Image.Transpose.FLIP_LEFT_RIGHT,
        3: Image.Transpose.ROTATE_180,
        4: Image.Transpose.FLIP_TOP_BOTTOM,
        5: Image.Transpose.TRANSPOSE,
        6: Image.Transpose.ROTATE_270,
        7: Image.Transpose.TRANSVERSE,
        8: Image.Transpose.ROTATE_90,
    }.get(orientation(image))
    image.load()
    return image if method is None else image.transpose(method)


def as_rgb(image: Image.Image) -> Image.Image:
    """A new 8-bit RGB image of `image`: what is transparent is on white (as an image viewer shows it and the
    captioners describe it, not the colours a transparent pixel happens to keep); 16-bit grey is scaled from
    0..65535 rather than clipped."""
    from PIL import Image

    if image.mode in _WIDE_GREY:
        image = image.convert("I").point(lambda value: value * (1 / 257)).convert("L")
    if "A" in image.getbands() or "a" in image.getbands() or "transparency" in image.info:
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return image.convert("RGB")
