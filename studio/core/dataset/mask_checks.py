"""Loss-mask files (dataset.masks = "folder"): which mask belongs to which image, and every mask a run
could not use, named with its file and the fix, before the run starts.

A mask is an image in the mask folder named as its training image (`cat.png` for `cat.jpg`). It is read
as a grey level: 8-bit grey as is, 16-bit grey scaled from 0..65535, a palette image by the grey level of
each pixel's palette colour, colour by its luminance; white trains, black is ignored. A mask of another
size than its image is scaled to it when its shape is the same (a half-size mask is fine); of another
shape it would be stretched and miss what it should cover, so it is refused. Only headers are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from studio.core.dataset.image_facts import Problem, inspect_image
from studio.core.dataset.image_headers import IMAGE_EXTENSIONS

SHAPE_TOLERANCE = 0.01  # relative difference of width/height below which a mask is only scaled
MASK_HINT = "save it again as a greyscale PNG of its image's size (white trains, black is ignored)"


def mask_files(folder: Path) -> dict[str, Path]:
    """Each image name (without its extension) -> its mask file in `folder`; the first by name wins."""
    files: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in IMAGE_EXTENSIONS:
            files.setdefault(path.stem, path)
    return files


def same_shape(mask: tuple[int, int], image: tuple[int, int]) -> bool:
    """Whether a mask of size `mask` scales onto an image of size `image` without stretching."""
    mask_ratio, image_ratio = mask[0] / max(1, mask[1]), image[0] / max(1, image[1])
    return abs(mask_ratio - image_ratio) <= SHAPE_TOLERANCE * image_ratio


def mask_problems(images: Sequence[tuple[Path, tuple[int, int] | None]], folder: Path) -> list[Problem]:
    """Problems of the masks of `images` (path, size as shown or None when unreadable) in `folder`: a missing
    folder, an image without a mask (it trains whole: a warning), a mask that cannot be read or that has
    another shape than its image (errors: the trainer refuses them at its start)."""
    if not folder.is_dir():
        return [Problem("error", "mask_folder_missing", str(folder),
                        "the mask folder (dataset.mask_folder) does not exist",
                        "create it with a mask image named as each training image (cat.png for cat.jpg), "
                        "fix dataset.mask_folder, or set dataset.masks = \"none\"")]
    try:
        files = mask_files(folder)
    except OSError as exc:
        return [Problem("error", "mask_folder_unreadable", str(folder), f"the mask folder cannot be read ({exc})",
                        "give your user read access to it")]
    out: list[Problem] = []
    for image, size in images:
        mask = files.get(image.stem)
        if mask is None:
            out.append(Problem("warning", "missing_mask", str(image),
                               f"has no mask in {folder} (looked for {image.stem}.png); it trains whole",
                               f"add {folder / (image.stem + '.png')} (white trains, black is ignored), or "
                               "leave it to train whole"))
            continue
        facts = inspect_image(mask)
        if facts.error is not None or facts.truncated:
            why = facts.error or "the file is cut off (truncated)"
            out.append(Problem("error", "unreadable_mask", str(mask),
                               f"the mask of {image.name} cannot be read: {why}; a run stops on it",
                               f"{MASK_HINT}, or delete it (the image then trains whole)"))
            continue
        if size is None or facts.size is None or facts.size == size or same_shape(facts.size, size):
            continue
        out.append(Problem("error", "mask_wrong_size", str(mask),
                           f"the mask is {facts.size[0]}x{facts.size[1]} but its image {image.name} is "
                           f"{size[0]}x{size[1]}: stretched to fit, it would not line up with the picture",
                           f"save the mask at {size[0]}x{size[1]}, the size of {image.name}"))
    return out
