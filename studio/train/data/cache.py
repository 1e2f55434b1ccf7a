"""Latent and text-embedding caches: each image and caption is encoded once per run.

The config already rejects caches that would contradict augmentations or
text-encoder training. Latents cached to disk live in RUN_DIR/cache/latents and
are reused by a resumed run; each node's local main process writes them.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from studio.core.config.schema import DatasetSection
from studio.core.files import replace
from studio.train.components import Components
from studio.train.data.batches import latent_draws
from studio.train.data.controls import control_pixels, edit_caption_key, encode_controls
from studio.train.data.items import TrainItem, load_image
from studio.train.data.masks import latent_mask, mask_source
from studio.train.families.base import Conditioning, FamilyAdapter
from studio.train.memory.cap import cap_mb
from studio.train.memory.transfer import to_device

Progress = Callable[[str, int, int], None]
# Cached latents stay on the GPU when they take at most this share of its memory (the VRAM estimate
# leaves more slack than that).
GPU_CACHE_FRACTION = 0.03


def gpu_cache_budget(device: torch.device) -> int:
    """Bytes of cached latents kept on `device` (none on the CPU): a share of the card, or of the memory
    STUDIO_GPU_CAP_MB leaves the run (a preset proven on a larger card keeps what its own card would)."""
    if device.type != "cuda":
        return 0
    total = torch.cuda.get_device_properties(device).total_memory
    cap = cap_mb()
    if cap is not None:
        total = min(total, int(cap * 2**20))
    return int(total * GPU_CACHE_FRACTION)


# Progress while the cached latents are looked up (each picture's bytes are read for its key), every so many pictures.
LOOKUP_PROGRESS_EVERY = 256


def _latent_file(folder: Path, item: TrainItem, base: str, drawn: str) -> Path:
    """The cache file of `item`'s latents; `drawn` says which latents they are (the mean, or the
    sample of one seed for this item's place), so a run that asks for other latents never reads these.

    The pictures are known by their bytes, not their path or time: keyed by the absolute path, a resume after
    the project moved (another disk, a renamed or copied folder) encoded every image again without a word,
    while a picture replaced by another under the same name, size and time would have been read back."""
    digests = []
    for path in (item.path, *item.controls):
        with path.open("rb") as file:
            digests.append(hashlib.file_digest(file, "sha1").hexdigest())
    key = "|".join([*digests, str(item.bucket), base, drawn])
    return folder / f"{hashlib.sha1(key.encode()).hexdigest()[:20]}.safetensors"


def _model_key(value: str, folder: Path) -> str:
    """A base model or VAE as the cache key `folder` (RUN_DIR/cache/latents) names it: one kept in the project (the
    folder above the runs' folder) by its place beside the run folder, as it moves with the project; one outside by
    its absolute path, which a moved project leaves as it is; a hub id as it is."""
    path = Path(value)
    project = folder.parent.parent.parent.parent
    if not path.is_absolute() or not path.exists() or not path.is_relative_to(project):
        return value
    return os.path.relpath(path, folder)


def _read_latents(path: Path) -> dict[str, torch.Tensor] | None:
    """The latents cached in `path`; None when there are none, or the file is damaged (a run killed or a
    machine cut off while writing it): that image is encoded again instead of every resume failing on it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        return None
    try:
        stored = load_file(str(path))
    except (OSError, SafetensorError):
        return None
    return stored if "latents" in stored else None


def _write_latents(stored: dict[str, torch.Tensor], path: Path) -> None:
    """Written under a temporary name and renamed: the file is whole or not there."""
    from safetensors.torch import save_file

    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file(stored, str(partial))
    replace(partial, path)


class LatentCache:
    def __init__(self) -> None:
        self.latents: dict[int, torch.Tensor] = {}
        self.masks: dict[int, torch.Tensor] = {}  # dataset.masks: each image's loss mask at its latent size
        self.controls: dict[int, torch.Tensor] = {}  # edit pairs: each target's reference latents (controls, C, h, w)

    def fill(
        self,
        adapter: FamilyAdapter,
        components: Components,
        items: list[TrainItem],
        dataset: DatasetSection,
        batch_size: int,
        disk: Path | None,
        writer: bool,
        progress: Progress,
    ) -> None:
        """Encode every item (or read it from `disk`); only a `writer` writes missing files.

        With dataset.latents = "sample" each item's latents are one sample, drawn from the seed and
        the item alone (the same whatever the batch size, and on every rank).
        """
        seed = adapter.config.training.seed
        drawn = "mean" if dataset.latents == "mean" else f"sample-{seed}"
        model = adapter.config.model
        # The VAE that encodes them: a separate model.vae (or another revision of the base) set in the run's
        # config before a resume makes other latents, never the old VAE's read back.
        files: dict[int, Path] = {}
        base = ""
        if disk is not None:
            base = "|".join([_model_key(model.base, disk),
                             *(f"{key}={value}" for key, value in (("vae", model.vae and _model_key(model.vae, disk)),
                                                                   ("revision", model.revision)) if value)])
        masks = mask_source(dataset)
        todo: list[TrainItem] = []
        for looked, item in enumerate(items, 1):
            stored = None
            if disk is not None:
                # A sample is drawn for the item's place: two copies of one picture keep their own draws.
                path = files[item.index] = _latent_file(disk, item, base,
                                                        drawn if drawn == "mean" else f"{drawn}-{item.index}")
                stored = _read_latents(path)
                if looked % LOOKUP_PROGRESS_EVERY == 0:  # every picture is read to find its file: minutes at 20,000
                    progress("caching", looked - len(todo) - (stored is None), len(items))
            if stored is not None:
                self.latents[item.index] = stored["latents"]
                if "controls" in stored:
                    self.controls[item.index] = stored["controls"]
                if masks is not None:  # the mask files are read again: a changed mask counts
                    self._keep_mask(item.index, load_image(item, "center", False, None, masks).mask)
            else:
                todo.append(item)
        by_bucket: dict[tuple[int, int], list[TrainItem]] = {}
        for item in todo:
            by_bucket.setdefault(item.bucket, []).append(item)
        done = len(items) - len(todo)
        for group in by_bucket.values():
            for start in range(0, len(group), batch_size):
                chunk = group[start : start + batch_size]
                loaded = [load_image(i, "center", False, None, masks) for i in chunk]
                pixels = torch.stack([torch.from_numpy(one.pixels) for one in loaded])
                draws = latent_draws(dataset, seed, [(0, item.index) for item in chunk])
                with torch.no_grad():
                    latents = adapter.encode_images(components, pixels, draws).float().cpu()
                references = self._encode_controls(adapter, components, chunk)
                for item, latent, one in zip(chunk, latents, loaded, strict=True):
                    stored = {"latents": latent.clone(memory_format=torch.contiguous_format)}
                    if item.index in references:
                        stored["controls"] = self.controls[item.index] = references[item.index]
                    self.latents[item.index] = stored["latents"]
                    self._keep_mask(item.index, one.mask)
                    if disk is not None and writer:
                        disk.mkdir(parents=True, exist_ok=True)
                        _write_latents(stored, files[item.index])
                done += len(chunk)
                progress("caching", done, len(items))

    @staticmethod
    def _encode_controls(adapter: FamilyAdapter, components: Components,
                         chunk: list[TrainItem]) -> dict[int, torch.Tensor]:
        """The reference latents of a chunk's edit pairs (none for plain images), by item index."""
        paired = [item for item in chunk if item.controls]
        if not paired:
            return {}
        encoded = encode_controls(adapter, components, torch.stack([control_pixels(item) for item in paired])).cpu()
        return {item.index: one.clone(memory_format=torch.contiguous_format)
                for item, one in zip(paired, encoded, strict=True)}

    def control_batch(self, item_indices: list[int], device: torch.device) -> torch.Tensor | None:
        """The reference latents of a batch of edit pairs, (B, controls, C, h, w); None for plain images."""
        if not self.controls:
            return None
        return to_device(torch.stack([self.controls[i] for i in item_indices]), device, torch.float32)

    def _keep_mask(self, index: int, mask: np.ndarray | None) -> None:
        if mask is not None:
            size = tuple(self.latents[index].shape[-2:])
            self.masks[index] = latent_mask(torch.from_numpy(mask)[None], size)[0]  # type: ignore[arg-type]

    def mask_batch(self, item_indices: list[int]) -> torch.Tensor | None:
        """The loss masks of a batch at the latent size (None without dataset.masks)."""
        if not self.masks:
            return None
        return torch.stack([self.masks[i] for i in item_indices])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.latents.values(), *self.controls.values()))

    def keep_on(self, device: torch.device, budget_bytes: int) -> bool:
        """Move every latent to `device` when they take at most `budget_bytes`: each step then
        stacks its latents on the GPU instead of copying them from the host."""
        if device.type == "cpu" or self.nbytes() > budget_bytes:
            return False
        self.latents = {index: latent.to(device) for index, latent in self.latents.items()}
        self.controls = {index: latent.to(device) for index, latent in self.controls.items()}
        return True

    def batch(self, item_indices: list[int], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return to_device(torch.stack([self.latents[i] for i in item_indices]), device, dtype)


class TextCache:
    """The captions' embeddings, built in system memory: FLUX.2 [klein] 9B keeps 12 MB a caption (512 rows of
    three Qwen3 layers), so a thousand captions left on the GPU where they were made took 12 GB of it beside the
    transformer. `keep_on` moves them to the GPU when they fit the share the latents leave."""

    def __init__(self) -> None:
        self.embeddings: dict[str, Conditioning] = {}

    def _keep(self, keys: list[str], cond: Conditioning) -> None:
        host = {name: value.detach().cpu() for name, value in cond.items()}
        for i, key in enumerate(keys):
            self.embeddings[key] = {name: value[i].clone() for name, value in host.items()}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for entry in self.embeddings.values() for t in entry.values())

    def keep_on(self, device: torch.device, budget_bytes: int) -> bool:
        """Move every embedding to `device` when they take at most `budget_bytes` (as `LatentCache.keep_on`)."""
        if device.type == "cpu" or self.nbytes() > budget_bytes:
            return False
        self.embeddings = {key: {name: t.to(device) for name, t in entry.items()}
                           for key, entry in self.embeddings.items()}
        return True

    def fill(
        self, adapter: FamilyAdapter, components: Components, captions: list[str], batch_size: int,
        progress: Progress,
    ) -> None:
        unique = list(dict.fromkeys(captions))
        for start in range(0, len(unique), max(1, batch_size)):
            chunk = unique[start : start + batch_size]
            with torch.no_grad():
                cond = adapter.encode_prompts(components, chunk)
            self._keep(chunk, cond)
            progress("caching", min(start + batch_size, len(unique)), len(unique))

    def fill_edit_pairs(
        self, adapter: FamilyAdapter, components: Components, items: list[TrainItem], dataset: DatasetSection,
        batch_size: int, progress: Progress,
    ) -> None:
        """The captions of edit pairs whose embedding depends on their controls (`prompt_sees_controls`): each
        caption (and the empty one when captions drop out) embedded with its own pair's controls at its bucket,
        mirrored too when dataset.flip may mirror them, under `edit_caption_key`."""
        captions = cache_captions([], dataset)
        todo = [(caption, item, flipped) for item in items for caption in dict.fromkeys([item.caption, *captions])
                for flipped in ((False, True) if dataset.flip else (False,))]
        by_bucket: dict[tuple[int, int], list[tuple[str, TrainItem, bool]]] = {}
        for entry in todo:
            by_bucket.setdefault(entry[1].bucket, []).append(entry)
        done = 0
        for group in by_bucket.values():
            for start in range(0, len(group), max(1, batch_size)):
                chunk = group[start : start + batch_size]
                pixels = torch.stack([control_pixels(item, flipped) for _, item, flipped in chunk])
                with torch.no_grad():
                    cond = adapter.encode_edit_prompts(components, [caption for caption, _, _ in chunk], pixels)
                self._keep([edit_caption_key(caption, item.index, flipped) for caption, item, flipped in chunk], cond)
                done += len(chunk)
                progress("caching", done, len(todo))

    def batch(self, captions: list[str], keys: list[str] | None = None) -> Conditioning:
        """The embeddings of a batch's captions (under `keys` where the cache keys them otherwise)."""
        chosen = keys if keys is not None else captions
        first = self.embeddings[chosen[0]]
        return {key: torch.stack([self.embeddings[c][key] for c in chosen]) for key in first}


def cache_captions(items: list[TrainItem], dataset: DatasetSection) -> list[str]:
    """Every caption a step can ask for: each item's, plus the empty one when captions drop out."""
    captions = [item.caption for item in items]
    if dataset.caption_dropout > 0:
        captions.append("")
    return captions

