"""Loss masks (dataset.masks): a weight per pixel from a folder of mask images named as the images, or from
the image's alpha channel, cropped and flipped with its image, shrunk to the latent size (area average), and
multiplied into the loss there. White (or opaque) trains, black (or transparent) is ignored; grey weighs in
between: 8-bit grey as is, 16-bit grey scaled from 0..65535 (50% grey weighs 0.5), a palette mask by the grey
level of each pixel's palette colour, colour by its luminance. An image without a mask (no file, or no alpha
channel) trains whole. Before the run, every mask is checked (`studio.core.dataset.mask_checks`): one that
cannot be read or has another shape than its image stops the run at its start, named, not when it comes up.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from studio.core.app_words import command_or_action
from studio.core.config.schema import DatasetSection
from studio.core.dataset.image_pixels import upright
from studio.core.dataset.mask_checks import mask_files, mask_problems
from studio.train.errors import TrainError
from studio.train.memory.transfer import to_device


class MaskSource:
    """Where each image's mask comes from; picklable (data-loader workers build batches with it)."""

    def __init__(self, dataset: DatasetSection) -> None:
        self.mode = dataset.masks
        self.files: dict[str, Path] = {}
        if self.mode == "folder":
            folder = Path(dataset.mask_folder or "")
            if not folder.is_dir():
                raise TrainError("data", f"the mask folder {folder} does not exist",
                                 "set dataset.mask_folder to a folder of mask images named as the training images",
                                 path=str(folder))
            self.files = mask_files(folder)

    def has_mask(self, image_path: Path) -> bool:
        return self.mode == "alpha" or image_path.stem in self.files

    def open(self, image_path: Path, image: Image.Image) -> Image.Image | None:
        """The mask of `image` (oriented, before conversion to RGB) as an 8-bit image of its size, or None."""
        if self.mode == "alpha":
            if image.mode in ("P", "LA", "PA", "La", "RGBa") or "transparency" in image.info:
                image = image.convert("RGBA")
            return image.getchannel("A") if "A" in image.getbands() else None
        path = self.files.get(image_path.stem)
        if path is None:
            return None
        try:
            with Image.open(path) as raw:
                mask = grey_mask(upright(raw))
        except (OSError, ValueError, SyntaxError) as exc:
            raise TrainError("data", f"the mask {path} cannot be read: {exc}", "replace or delete the mask file",
                             path=str(path)) from None
        if mask.size != image.size:
            mask = mask.resize(image.size, Image.Resampling.BILINEAR)
        return mask


WIDE_MODES = {"I": 65535.0, "I;16": 65535.0, "I;16B": 65535.0, "I;16L": 65535.0, "I;16N": 65535.0, "F": 1.0}


def grey_mask(image: Image.Image) -> Image.Image:
    """A mask image as 8-bit grey: 16-bit (and 32-bit integer) grey scaled from 0..65535, float from 0..1;
    the rest (palette, colour, 1-bit) by Pillow's luminance, a palette entry by its grey level."""
    full = WIDE_MODES.get(image.mode)
    if full is None:
        return image.convert("L")
    values = np.asarray(image, dtype=np.float64) / full
    return Image.fromarray(np.rint(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8), mode="L")


def mask_source(dataset: DatasetSection) -> MaskSource | None:
    return None if dataset.masks == "none" else MaskSource(dataset)


def mask_array(mask: Image.Image) -> np.ndarray:
    """An 8-bit mask -> float32 weights in [0, 1], shaped (1, H, W)."""
    return (np.asarray(mask, dtype=np.float32) / 255.0)[None]


def check_mask_files(items: list[Any], dataset: DatasetSection, warn: Callable[[str, str | None, str], None]) -> None:
    """Before the run: a mask that cannot be read or has another shape than its image stops it here, named
    with the fix; one warning says how many training images have no mask file (they train whole)."""
    if dataset.masks != "folder":
        return
    folder = Path(dataset.mask_folder or "")
    images = [(item.path, item.size) for item in items if not item.is_class]
    problems = mask_problems(images, folder)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        lists = command_or_action("run studio-train check-dataset to list them", "the Dataset page shows them")
        more = f" (and {len(errors) - 1} more: {lists})" if len(errors) > 1 else ""
        raise TrainError("data", f"{errors[0].path}: {errors[0].message}{more}", errors[0].hint, path=errors[0].path)
    missing = [Path(p.path).name for p in problems if p.code == "missing_mask"]
    if missing:
        warn(f"{len(missing)} of the training images have no mask in {dataset.mask_folder} (e.g. {missing[0]}); "
             "they train whole", dataset.mask_folder, "add a mask image named as each image (white trains)")


def latent_mask(mask: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Pixel masks (B, 1, H, W) averaged down to the latent size (h, w)."""
    return F.interpolate(mask.float(), size=size, mode="area")


def masked_mse(prediction: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
               weights: torch.Tensor) -> torch.Tensor:
    """Mean squared error per sample over its masked area (mask-weighted mean), times its weight, averaged
    over the batch: a latent cell whose mask is 0 adds nothing, and an image masked out entirely adds 0."""
    cells = latent_mask(to_device(mask, prediction.device), tuple(target.shape[-2:]))  # type: ignore[arg-type]
    error = F.mse_loss(prediction.float(), target.float(), reduction="none") * cells
    dims = list(range(1, error.ndim))
    area = (cells.expand_as(error)).sum(dim=dims)
    per_sample = error.sum(dim=dims) / area.clamp(min=1e-8)
    return (per_sample * to_device(weights, per_sample.device)).mean()


def step_loss(scheme: Any, prediction: torch.Tensor, noised: Any, batch: dict[str, Any], cache: Any) -> torch.Tensor:
    """The loss of one micro-batch: the scheme's own, weighted by the batch's masks when it has them (pixel
    masks read with the images, or the latent cache's)."""
    mask = batch.get("masks")
    if mask is None and cache is not None:
        mask = cache.mask_batch(batch["items"])
    if mask is None:
        return scheme.loss(prediction, noised, batch["loss_weights"])
    weights = noised.weights * to_device(batch["loss_weights"], noised.weights.device)
    return masked_mse(prediction, noised.target, mask, weights)
