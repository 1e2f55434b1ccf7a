"""Presets that use the card: at run start, the fastest settings the estimate says fit the GPU.

A preset written for a 12 GB card leaves most of an 80 GB card unused: batch 1 steps are
host-bound, and gradient checkpointing recomputes a forward pass the memory no longer needs to
save. When `training.fill_card` is on (a preset that allows it sets it), the run is started with
gradient checkpointing off where the config's batch fits without it, then at the largest batch
per GPU that fits with the estimate's margin ("fits", not "tight"), at accumulation 1, with the
learning rate scaled as the batch plan scales it (Prodigy keeps its own). The run's other counts in
steps (max_steps, warm-up, samples and checkpoints every N steps) are scaled by the change of the
effective batch, so the run sees as many images and samples and saves after as many images as the
preset said. What was chosen is said in one sentence at launch. Pure Python: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from studio.core.config.files.paths import ResolvedConfig
from studio.core.estimate.plans.batch_plan import largest_batch, scaled_learning_rate
from studio.core.hardware.report import GPUInfo


@dataclass(frozen=True)
class CardFill:
    config: ResolvedConfig  # the config the run starts with
    changes: list[str] = field(default_factory=list)  # what was changed, each as a person reads it
    reason: str = ""  # why nothing was changed, when the setting is on and nothing was

    def describe(self) -> str:
        """One sentence for the console ('' when training.fill_card is off)."""
        if self.changes:
            return "training.fill_card: " + "; ".join(self.changes)
        return f"training.fill_card: {self.reason}" if self.reason else ""


def _scaled(steps: int | None, ratio: float) -> int | None:
    """A count of steps for a run whose steps each take `1 / ratio` times the images (at least 1; 0 stays 0)."""
    if not steps:
        return steps
    return max(1, math.ceil(steps * ratio))


def _with_training(config: ResolvedConfig, **update: object) -> ResolvedConfig:
    return config.model_copy(update={"training": config.training.model_copy(update=update)})


def fill_card(config: ResolvedConfig, gpu: GPUInfo | None) -> CardFill:
    """The settings `config` starts with on `gpu` (its own when training.fill_card is off or nothing better fits)."""
    training = config.training
    if not training.fill_card:
        return CardFill(config)
    if gpu is None or config.launch.cpu:
        return CardFill(config, reason="no GPU to fill; the config's settings are kept")
    changes: list[str] = []
    candidate = config
    if training.gradient_checkpointing:
        without = _with_training(config, gradient_checkpointing=False)
        if largest_batch(without, gpu)[0] >= training.batch_size:
            candidate = without
            changes.append("gradient checkpointing off (the batch fits without it)")
    largest, peak_mb = largest_batch(candidate, gpu)
    if largest <= training.batch_size:
        if not changes:
            return CardFill(config, reason=f"batch {training.batch_size} is the largest that fits "
                                           f"{gpu.name}; the config's settings are kept")
        return CardFill(candidate, changes)
    old_effective, new_effective = training.effective_batch(), largest
    ratio = old_effective / new_effective
    learning_rate, scaling = scaled_learning_rate(config, largest)
    # The text encoders' own rate scales as the denoiser's does: the recipe's ratio between the two stays.
    text_encoder_lr = training.text_encoder_lr and training.text_encoder_lr * learning_rate / training.learning_rate
    chosen = _with_training(
        candidate, batch_size=largest, gradient_accumulation=1, learning_rate=learning_rate,
        text_encoder_lr=text_encoder_lr,
        max_steps=_scaled(training.max_steps, ratio), lr_warmup_steps=_scaled(training.lr_warmup_steps, ratio) or 0,
    )
    chosen = chosen.model_copy(update={
        "sampling": chosen.sampling.model_copy(update={"every_n_steps": _scaled(config.sampling.every_n_steps,
                                                                                ratio) or 0}),
        "output": chosen.output.model_copy(update={"save_every_n_steps": _scaled(config.output.save_every_n_steps,
                                                                                 ratio) or 0}),
    })
    accumulation = f" x accumulation {training.gradient_accumulation}" if training.gradient_accumulation > 1 else ""
    changes.append(f"batch {training.batch_size}{accumulation} -> {largest} (estimated peak "
                   f"{peak_mb / 1024:.1f} GB of {gpu.name}'s {gpu.total_mb / 1024:.0f} GB)")
    encoders = f"; the text encoders' {training.text_encoder_lr:.3g} -> {text_encoder_lr:.3g}" if text_encoder_lr else ""
    changes.append(f"learning rate {training.learning_rate:.3g} -> {learning_rate:.3g}{encoders} ({scaling})")
    if training.max_steps:
        changes.append(f"max_steps {training.max_steps} -> {chosen.training.max_steps} (the same images)")
    return CardFill(chosen, changes)


def filled_for_launch(config: ResolvedConfig) -> CardFill:
    """`config` as a run starts it on the GPU the studio plans for ($STUDIO_HARDWARE's profile, else this
    machine's GPU that launch.gpu_ids chooses): itself unless training.fill_card is on (no probe then)."""
    if not config.training.fill_card:
        return CardFill(config)
    from studio.core.hardware.machine.probe import load_hardware

    return fill_card(config, load_hardware().run_gpus(config.launch)[0])
