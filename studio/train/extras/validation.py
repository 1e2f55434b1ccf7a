"""The validation loss: held-out images (dataset.validation_fraction or dataset.validation_folder) measured
every training.validation_every steps and at the end, at fixed noise levels with fixed noise, so one run's
numbers compare with another's.

Every held-out image is measured at each of `TIMESTEPS` (fractions of the noise schedule) with noise drawn
from a seed of its own (not training.seed: runs with other seeds see the same noise), from the mean of its
VAE latents and its center crop, with LoRA dropout off. The loss is the plain mean squared error of the
family's target (masked where dataset.masks says so), without min-SNR or flow-matching weights. Every rank
measures the same images (the numbers agree), rank 0 writes the `validation` event; nothing it draws comes
from the training's random generators, so a run trains the same with validation on or off.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from studio.core.config.schema import ConceptSection, TrainConfig
from studio.core.dataset.split import held_out_count, split_problem
from studio.core.runs.events import Validation
from studio.train.data.batches import stream_rng
from studio.train.data.controls import REFERENCES, control_pixels, encode_captions, encode_controls
from studio.train.data.items import TrainItem, center_crop_conditioning, collect_items, load_image
from studio.train.data.masks import mask_source, masked_mse
from studio.train.errors import TrainError
from studio.train.families.schemes import DiffusionScheme, FlowMatchingScheme, Noised
from studio.train.memory.transfer import to_device

TIMESTEPS = (0.1, 0.3, 0.5, 0.7, 0.9)
VALIDATION_SEED = 1_000_003  # the noise's own seed: the same for every run
_STREAM = 7


def split_items(items: list[TrainItem], config: TrainConfig, warn: Any) -> tuple[list[TrainItem], list[TrainItem]]:
    """(training items, held-out items), each indexed from 0. A fraction holds out the instance images whose
    file names hash lowest: the same images in every run, whatever the seed; a folder is read as a concept."""
    d = config.dataset
    if d.validation_folder:
        folder = config.model_copy(deep=True)
        folder.dataset.concepts = [ConceptSection(path=d.validation_folder)]
        held = collect_items(folder, warn)
        # A validation folder inside an image folder (images/val/) was walked into with the training images:
        # the loss was measured on images the run trained on. They are held out of training instead.
        held_paths = {item.path for item in held}
        kept = [item for item in items if item.path not in held_paths]
        if not any(not item.is_class for item in kept):  # the image folder itself: nothing else to train on
            warn(f"dataset.validation_folder {d.validation_folder} holds the training images: the validation loss "
                 "measures images the run trains on", d.validation_folder,
                 "name a folder of other images, or hold out a share with dataset.validation_fraction")
        elif len(kept) < len(items):
            warn(f"{len(items) - len(kept)} images of dataset.validation_folder {d.validation_folder} are in an "
                 "image folder too; they are left out of training, so the validation loss measures images the "
                 "run does not train on", d.validation_folder,
                 "move the validation folder out of the image folders to say nothing")
            return _indexed(kept), _indexed(held)
        return items, _indexed(held)
    if d.validation_fraction <= 0:
        return items, []
    instances = [item for item in items if not item.is_class]
    count = held_out_count(len(instances), d.validation_fraction)
    problem = split_problem(len(instances), d.validation_fraction)
    if problem is not None:
        message, _, allowed = problem.partition("; ")
        raise TrainError("config", f"dataset.validation_fraction = {d.validation_fraction} {message}",
                         f"lower dataset.validation_fraction: {allowed}")
    order = sorted(instances, key=lambda i: hashlib.sha1(f"{i.path.parent.name}/{i.path.name}".encode()).hexdigest())
    held_paths = {item.path for item in order[:count]}
    kept = [item for item in items if item.path not in held_paths]
    return _indexed(kept), _indexed([item for item in items if item.path in held_paths])


def _indexed(items: list[TrainItem]) -> list[TrainItem]:
    return [replace(item, index=i) for i, item in enumerate(items)]


def fixed_noised(scheme: Any, latents: torch.Tensor, fraction: float, noise: torch.Tensor) -> Noised:
    """`latents` noised with `noise` at the noise level `fraction` of the way through the schedule."""
    batch = latents.shape[0]
    if isinstance(scheme, DiffusionScheme):
        step = min(scheme.timesteps - 1, round(fraction * (scheme.timesteps - 1)))
        timesteps = torch.full((batch,), step, dtype=torch.long, device=latents.device)
        noisy = scheme.scheduler.add_noise(latents, noise, timesteps)
        target = noise if scheme.prediction_type == "epsilon" else scheme.scheduler.get_velocity(latents, noise,
                                                                                                  timesteps)
        return Noised(noisy, timesteps, target, torch.ones(batch, device=latents.device))
    if isinstance(scheme, FlowMatchingScheme):
        index = min(scheme.num_train_timesteps - 1, int(fraction * scheme.num_train_timesteps))
        sigma = float(scheme.sigmas[index])
        timesteps = torch.full((batch,), float(scheme.timesteps[index]), device=latents.device)
        noisy = (1.0 - sigma) * latents + sigma * noise
        return Noised(noisy, timesteps, noise - latents, torch.ones(batch, device=latents.device))
    raise TypeError(f"no fixed-timestep validation for {type(scheme).__name__}")


@dataclass
class _Batch:
    items: list[TrainItem]
    latents: torch.Tensor
    masks: torch.Tensor
    noise: list[torch.Tensor]  # one per timestep
    cond: dict[str, torch.Tensor] | None  # None: encoded at each measurement (trained text encoders)
    info: dict[str, Any]


class ValidationLoss:
    """Prepared once (latents, masks, noise; embeddings unless the text encoders train), measured on demand."""

    def __init__(self, trainer: Any, held_out: list[TrainItem]) -> None:
        self.trainer = trainer
        self.every = trainer.config.training.validation_every
        self.held_out = held_out
        self.batches: list[_Batch] = []
        self.last_step = -1
        if self.every and held_out:
            self._prepare()

    def due(self, step: int) -> bool:
        return bool(self.batches) and step != self.last_step and (step % self.every == 0 or step == self.trainer.total)

    def _prepare(self) -> None:
        t = self.trainer
        adapter, components, config = t.adapter, t.components, t.config
        masks = mask_source(config.dataset)
        by_bucket: dict[tuple[int, int], list[TrainItem]] = {}
        for item in self.held_out:
            by_bucket.setdefault(item.bucket, []).append(item)
        size = config.training.batch_size
        for group in by_bucket.values():
            for start in range(0, len(group), size):
                chunk = group[start : start + size]
                loaded = [load_image(item, "center", False, None, masks) for item in chunk]
                pixels = torch.stack([torch.from_numpy(one.pixels) for one in loaded])
                with torch.no_grad():
                    latents = adapter.encode_images(components, pixels, None).float().cpu()
                mask = torch.stack([torch.from_numpy(one.mask) if one.mask is not None
                                    else torch.ones((1, *one.pixels.shape[1:])) for one in loaded])
                noise = []
                for k in range(len(TIMESTEPS)):
                    draws = [torch.Generator("cpu").manual_seed(
                        int(stream_rng(VALIDATION_SEED, _STREAM, k, item.index).integers(2**62))) for item in chunk]
                    noise.append(torch.stack([torch.randn(tuple(latents.shape[1:]), generator=g) for g in draws]))
                conditioning = [center_crop_conditioning(item) for item in chunk]
                info: dict[str, Any] = {
                    "items": [item.index for item in chunk], "target_size": (chunk[0].bucket[1], chunk[0].bucket[0]),
                    "original_sizes": [c[0] for c in conditioning], "crops_top_left": [c[1] for c in conditioning]}
                if chunk[0].controls:  # edit pairs: the controls' latents go with the targets'
                    info[REFERENCES] = encode_controls(adapter, components,
                                                       torch.stack([control_pixels(i) for i in chunk])).cpu()
                cond = None if config.method.train_text_encoder else self._encode(chunk)
                self.batches.append(_Batch(chunk, latents, mask, noise, cond, info))

    def _encode(self, chunk: list[TrainItem]) -> dict[str, torch.Tensor]:
        t = self.trainer
        with torch.no_grad():
            cond = encode_captions(t.adapter, t.components, [item.caption for item in chunk], chunk)
        return {k: v.detach().cpu() for k, v in cond.items()}

    def measure(self, step: int) -> Validation:
        t = self.trainer
        acc, adapter, device = t.accelerator, t.adapter, t.accelerator.device
        scheme = adapter.noise_scheme(t.components)
        modes = [module.training for module in t.train_modules]
        for module in t.train_modules:
            module.eval()  # LoRA dropout off: the same network every measurement
        total, count = 0.0, 0
        try:
            with torch.no_grad():
                for batch in self.batches:
                    cond = batch.cond if batch.cond is not None else self._encode(batch.items)
                    cond = adapter.extra_conditioning(batch.info, {k: to_device(v, device) for k, v in cond.items()},
                                                      device)
                    if REFERENCES in batch.info:
                        cond[REFERENCES] = to_device(batch.info[REFERENCES], device)
                    latents = to_device(batch.latents, device)
                    for fraction, noise in zip(TIMESTEPS, batch.noise, strict=True):
                        noised = fixed_noised(scheme, latents, fraction, to_device(noise, device))
                        with acc.autocast():
                            prediction = adapter.predict(t.components.denoiser, noised.noisy, noised.timesteps, cond)
                        loss = masked_mse(prediction, noised.target, batch.masks, noised.weights)
                        total += float(loss) * len(batch.items)
                        count += len(batch.items)
        finally:
            for module, mode in zip(t.train_modules, modes, strict=True):
                module.train(mode)
        self.last_step = step
        return Validation(step=step, loss=total / max(count, 1), images=len(self.held_out),
                          timesteps=list(TIMESTEPS))


def validation_due(trainer: Any) -> bool:
    """Whether the loop's step measures the validation loss (its step losses are read back first)."""
    validation: ValidationLoss | None = getattr(trainer, "validation", None)
    return validation is not None and validation.due(trainer.step)


def validate_after_step(trainer: Any) -> None:
    """The loop's hook after each step: measure and report when it is due (on every rank alike)."""
    if validation_due(trainer):
        with trainer.clock.timed("validation"):
            measured = trainer.validation.measure(trainer.step)
        if not math.isfinite(measured.loss):  # the weights went NaN: the training loss says so at its read-back
            raise TrainError("nan", f"the validation loss became {measured.loss} at step {measured.step}",
                             "lower training.learning_rate, use bf16 instead of fp16, or set "
                             "training.max_grad_norm to 1.0")
        trainer.reporter.emit(measured)
