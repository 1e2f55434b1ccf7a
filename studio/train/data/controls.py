"""The control images of edit pairs: loaded beside their target, encoded as reference latents, shown with samples.

Resolution policy: a pair's control images are resized to cover its target's bucket and cropped at the
center to it, mirrored when the target is. Controls and target then have the same size, so a batch stacks
them and the cache keeps them beside the target's latents; the denoiser sees each control as many reference
tokens as target tokens. Samples give the pipeline the control at the sample size in the same way, so the
trained LoRA meets at sampling the references it learned with. The controls' latents are the VAE's
distribution's mode, as the pipelines encode a reference image ("argmax"), whatever dataset.latents says.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from studio.core.config.schema import TrainConfig
from studio.core.dataset.edit_pairs.pair_checks import sample_control_problem
from studio.core.dataset.image_pixels import as_rgb, upright
from studio.core.runs.folders import SAMPLES_DIR
from studio.train.components import Components
from studio.train.data.items import TrainItem, cover_size
from studio.train.errors import TrainError
from studio.train.families.base import REFERENCES, Conditioning, FamilyAdapter
from studio.train.memory.transfer import to_device

__all__ = ["REFERENCES", "batch_references", "control_pixels", "edit_caption_key", "edit_caption_keys", "encode_captions",
           "encode_controls", "fitted_control", "sample_controls", "save_sample_controls"]


def fitted_control(path: Path, size: tuple[int, int], flipped: bool = False) -> Image.Image:
    """A control image oriented, resized to cover `size` (width, height), cropped at the center to it."""
    try:
        with Image.open(path) as raw:
            image = as_rgb(upright(raw))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise TrainError("data", f"the control image {path} cannot be read: {exc}",
                         "replace it with a working copy, or remove its pair", path=str(path)) from None
    width, height = size
    new_w, new_h = cover_size(image.size, size)
    if (new_w, new_h) != image.size:
        image = image.resize((new_w, new_h), Image.Resampling.LANCZOS)
    left, top = (new_w - width) // 2, (new_h - height) // 2
    image = image.crop((left, top, left + width, top + height))
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flipped else image


def control_pixels(item: TrainItem, flipped: bool = False) -> torch.Tensor:
    """(controls, 3, H, W) in [-1, 1] at the item's bucket."""
    arrays = [np.asarray(fitted_control(path, item.bucket, flipped), dtype=np.float32) for path in item.controls]
    stacked = np.stack(arrays).transpose(0, 3, 1, 2) / 127.5 - 1.0
    return torch.from_numpy(np.ascontiguousarray(stacked, dtype=np.float32))


def encode_controls(adapter: FamilyAdapter, components: Components, pixels: torch.Tensor) -> torch.Tensor:
    """(B, controls, 3, H, W) pixels -> (B, controls, C, h, w) reference latents (the distribution's mode)."""
    batch, count = pixels.shape[:2]
    with torch.no_grad():
        latents = adapter.encode_images(components, pixels.flatten(0, 1), None).float()
    return latents.unflatten(0, (batch, count))


def batch_references(adapter: FamilyAdapter, components: Components, batch: dict[str, Any],
                     cached: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """A batch's reference latents on `device`: from the cache, or encoded from its control pixels; None for a
    batch of plain images."""
    if cached is not None:
        return cached
    if "controls" not in batch:
        return None
    return encode_controls(adapter, components, to_device(batch["controls"], device))


def encode_captions(adapter: FamilyAdapter, components: Components, captions: list[str], items: Sequence[TrainItem],
                    controls: torch.Tensor | None = None) -> Conditioning:
    """The captions' conditioning. A family whose prompt sees the controls (`prompt_sees_controls`: Qwen-Image-Edit)
    embeds each caption with its pair's controls: `controls` (a batch's pixels, mirrored with their targets) or
    else the items' own at their bucket, unmirrored (cached latents: no mirroring)."""
    if not adapter.prompt_sees_controls or not any(item.controls for item in items):
        return adapter.encode_prompts(components, captions)
    if controls is None:
        controls = torch.stack([control_pixels(item) for item in items])
    return adapter.encode_edit_prompts(components, captions, controls)


def edit_caption_key(caption: str, item: int, flipped: bool) -> str:
    """The caption cache's key of a caption embedded with its pair's controls (`prompt_sees_controls`): the caption,
    the pair (its control files at its bucket) and whether they were mirrored."""
    return f"{caption}\x00{item}\x00{int(flipped)}"


def edit_caption_keys(adapter: FamilyAdapter, batch: dict[str, Any], items: Sequence[TrainItem]) -> list[str] | None:
    """The caption cache's keys of a batch whose captions were embedded with their pairs' controls; None for the
    others (the cache keys them by the caption alone)."""
    if not adapter.prompt_sees_controls or not any(item.controls for item in items):
        return None
    flipped = batch.get("flipped") or [False] * len(items)
    return [edit_caption_key(caption, item.index, mirrored)
            for caption, item, mirrored in zip(batch["captions"], items, flipped, strict=True)]


def sample_controls(config: TrainConfig, items: Sequence[TrainItem]) -> tuple[Path, ...]:
    """The control images samples edit: sampling.control_image, else the first pair's controls; none for a
    dataset of plain images."""
    if config.dataset.kind != "edit":
        return ()
    if config.sampling.control_image:
        path = Path(config.sampling.control_image)
        why = sample_control_problem(path)
        if why is not None:  # read at every round of samples, it would fail each one
            raise TrainError("config", f"sampling.control_image {path} {why}",
                             "choose the control image the samples edit, or leave it empty for the first pair's",
                             path=str(path))
        return (path,)
    return next((item.controls for item in items if item.controls), ())


def save_sample_controls(controls: Sequence[Image.Image], run_dir: Path) -> list[Path]:
    """The controls the samples edit, as samples/control-N.png beside them (written once per run)."""
    folder = run_dir / SAMPLES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"control-{index}.png" for index in range(len(controls))]
    for image, path in zip(controls, paths, strict=True):
        if not path.is_file():
            image.save(path)
    return paths
