"""The order of training: global batches per epoch, split between ranks, the same on every resume.

Each epoch's order comes from (seed, epoch) alone, so step N of a resumed run draws
exactly the images step N of an uninterrupted run drew. A global batch holds
`batch_size x world_size` images of one bucket; rank r takes its own slice of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from studio.core.config.schema import DatasetSection
from studio.train.data.controls import control_pixels
from studio.train.data.items import TrainItem, center_crop_conditioning, load_image, prepare_caption
from studio.train.data.masks import mask_source

# The stream of stream_rng's keys that draws latent samples (1: epoch order, 2: augmentation, 3: noise).
LATENT_STREAM = 4


def stream_rng(seed: int, *keys: int) -> np.random.Generator:
    """A generator that depends only on the seed and the keys (epoch, micro-batch, position...)."""
    return np.random.default_rng([seed, *keys])


def latent_draws(dataset: DatasetSection, seed: int, keys: Sequence[tuple[int, ...]]) -> list[torch.Generator] | None:
    """One generator per image for a sample of its latents, from the seed and the image's keys
    (its cache entry, or its micro-batch and place); None when dataset.latents asks for the mean."""
    if dataset.latents == "mean":
        return None
    return [torch.Generator("cpu").manual_seed(int(stream_rng(seed, LATENT_STREAM, *key).integers(2**62)))
            for key in keys]


class EpochPlan:
    """Global batches of item indices for every epoch."""

    def __init__(self, items: list[TrainItem], batch_size: int, world_size: int, seed: int) -> None:
        self.items = items
        self.batch_size = batch_size
        self.world_size = world_size
        self.global_batch = batch_size * world_size
        self.seed = seed
        buckets: dict[tuple[int, int], list[int]] = {}
        for item in items:
            buckets.setdefault(item.bucket, []).extend([item.index] * item.repeats)
        self._buckets = [buckets[key] for key in sorted(buckets)]
        self.batches_per_epoch = sum(math.ceil(len(b) / self.global_batch) for b in self._buckets)
        self._cache: tuple[int, list[list[int]]] | None = None

    def epoch(self, epoch: int) -> list[list[int]]:
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        rng = stream_rng(self.seed, 1, epoch)
        batches: list[list[int]] = []
        for members in self._buckets:
            order = [members[i] for i in rng.permutation(len(members))]
            for start in range(0, len(order), self.global_batch):
                chunk = order[start : start + self.global_batch]
                # A short last chunk is filled from the bucket's start so every rank gets a full batch.
                while len(chunk) < self.global_batch:
                    chunk.append(order[(len(chunk) + start) % len(order)])
                batches.append(chunk)
        shuffled = [batches[i] for i in rng.permutation(len(batches))]
        self._cache = (epoch, shuffled)
        return shuffled

    def micro_batch(self, index: int) -> tuple[int, list[int]]:
        """(epoch, global batch) of micro-batch `index` counted from the run's start."""
        epoch, position = divmod(index, self.batches_per_epoch)
        return epoch, self.epoch(epoch)[position]

    def rank_slice(self, batch: list[int], rank: int) -> list[int]:
        return batch[rank * self.batch_size : (rank + 1) * self.batch_size]


class MicroBatches(torch.utils.data.Dataset[dict[str, Any]]):
    """Item `i` is this rank's part of micro-batch `start + i`: pixels (unless cached), captions, sizes."""

    def __init__(
        self,
        plan: EpochPlan,
        dataset: DatasetSection,
        rank: int,
        start: int,
        count: int,
        with_pixels: bool,
        augment: bool = True,
    ) -> None:
        self.plan = plan
        self.dataset = dataset
        self.rank = rank
        self.start = start
        self.count = count
        self.with_pixels = with_pixels
        self.augment = augment
        self.masks = mask_source(dataset) if with_pixels else None  # cached latents: the cache holds the masks

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> dict[str, Any]:
        index = self.start + i
        epoch, batch = self.plan.micro_batch(index)
        chosen = self.plan.rank_slice(batch, self.rank)
        captions, pixels, original_sizes, crops, weights, masks, controls = [], [], [], [], [], [], []
        flipped: list[bool] = []
        for position, item_index in enumerate(chosen):
            item = self.plan.items[item_index]
            # Drawn from the image's place in the global batch (rank 0's key as it always was), not from the GPU
            # holding it: N GPUs crop, flip and drop captions as one GPU with the same global batch does.
            place = self.rank * self.plan.batch_size + position
            rng = stream_rng(self.plan.seed, 2, index, 0, place) if self.augment else None
            captions.append(prepare_caption(item.caption, self.dataset, rng))
            weights.append(item.loss_weight)
            if self.with_pixels:
                loaded = load_image(item, self.dataset.crop, self.dataset.flip, rng, self.masks)
                pixels.append(torch.from_numpy(loaded.pixels))
                if loaded.mask is not None:
                    masks.append(torch.from_numpy(loaded.mask))
                if item.controls:  # an edit pair: its controls at its bucket, mirrored with it
                    controls.append(control_pixels(item, loaded.flipped))
                    flipped.append(loaded.flipped)
                original_sizes.append(loaded.original_size)
                crops.append(loaded.crop_top_left)
            else:
                # Cached latents come from the center crop; their conditioning says so.
                original, crop_top_left = center_crop_conditioning(item)
                original_sizes.append(original)
                crops.append(crop_top_left)
        out: dict[str, Any] = {
            "index": index,
            "epoch": epoch,
            "items": chosen,
            "captions": captions,
            "loss_weights": torch.tensor(weights, dtype=torch.float32),
            "original_sizes": original_sizes,
            "crops_top_left": crops,
            "target_size": (self.plan.items[chosen[0]].bucket[1], self.plan.items[chosen[0]].bucket[0]),
        }
        if self.with_pixels:
            out["pixels"] = torch.stack(pixels)
        if masks:
            out["masks"] = torch.stack(masks)
        if controls:
            out["controls"] = torch.stack(controls)  # (B, controls, 3, H, W)
            out["flipped"] = flipped  # which pairs are mirrored (a prompt that sees the control sees it so)
        return out


def micro_batch_loader(data: MicroBatches, workers: int, pin_memory: bool = False,
                       ) -> torch.utils.data.DataLoader[dict[str, Any]]:
    """Batches are built by the dataset itself; the loader adds worker processes (each a couple of
    batches ahead) and, for a GPU, pinned memory, so the copy to the GPU does not stall the step.

    The loader draws its workers' base seed from a generator of its own: from torch's global
    one, that draw would shift every later random number (LoRA dropout) by one on a resumed
    run, which restores the global generator before it builds the loader.
    """
    return torch.utils.data.DataLoader(
        data, batch_size=None, shuffle=False, num_workers=workers, persistent_workers=False,
        collate_fn=_identity, pin_memory=pin_memory,  # type: ignore[arg-type]
        generator=torch.Generator().manual_seed(data.plan.seed),
    )


def _identity(value: dict[str, Any]) -> dict[str, Any]:
    return value


def total_steps(plan: EpochPlan, accumulation: int, length: tuple[str, int]) -> int:
    """Optimizer steps of a run: max_steps, or the steps that take every micro-batch of its epochs.

    Micro-batches run on from one epoch into the next (a step may take the end of one and the start of
    the next), so N epochs are ceil(N x batches per epoch / accumulation) steps: the last one takes at
    most accumulation - 1 micro-batches of the epoch after. Rounding each epoch's steps up instead trained
    more epochs than asked (3 for 2 at 4 batches an epoch and accumulation 3; 4 times as many at 1).
    """
    kind, count = length
    if kind == "steps":
        return count
    return max(1, math.ceil(count * plan.batches_per_epoch / accumulation))


Batch = dict[str, Any]
BatchSource = Callable[[int], Batch]
