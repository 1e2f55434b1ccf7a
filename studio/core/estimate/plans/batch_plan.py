"""The largest batch that fits a GPU, and the two ways to use it.

A card that trains at batch 1 when batch 8 fits leaves most of its speed unused: each
step pays the same launch overhead for one image instead of eight. The plan keeps
everything but the batch as the config has it and asks the VRAM estimate for the
largest batch per GPU that still fits (not merely "tight"). It then states both
choices: keep the config's effective batch (batch x gradient accumulation, the same
learning rate), or fill the card at accumulation 1 with the learning rate scaled by the
square root of the batch ratio (the usual rule for Adam-style optimizers; Prodigy
finds its own step size and keeps its learning rate). Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import Fit, estimate_vram, fit
from studio.core.hardware.report import GPUInfo

MAX_BATCH = 64  # past this the step is compute-bound on every card; the search stops here


@dataclass(frozen=True)
class BatchPlan:
    largest: int  # the largest batch per GPU that fits; 0 when batch 1 does not (or only tightly)
    capped: bool  # the search stopped at MAX_BATCH (more may fit)
    largest_mb: float  # the estimated peak at `largest` (at batch 1 when nothing fits)
    batch: int  # the config's batch and accumulation
    accumulation: int
    keep_batch: int  # the effective batch kept: keep_batch x keep_accumulation == batch x accumulation
    keep_accumulation: int
    learning_rate: float
    fill_learning_rate: float  # for `largest` at accumulation 1
    scaling: str  # how fill_learning_rate follows from learning_rate
    one_is_tight: bool = False  # nothing fits comfortably, but batch 1 fits within the 10% margin

    @property
    def effective(self) -> int:
        return self.batch * self.accumulation

    @property
    def badge(self) -> str:
        """The short form the Model page shows beside the fit badge."""
        if not self.largest:
            return "batch 1 is tight" if self.one_is_tight else "batch 1 does not fit"
        return f"batch {self.largest}{'+' if self.capped else ''} fits"

    def describe(self) -> str:
        """The plan in a sentence or two: what fits, how to keep the effective batch, how to fill the card."""
        if not self.largest:
            if self.one_is_tight:
                return (f"only batch 1 fits, and tightly ({self.largest_mb / 1024:.1f} GB): "
                        "use gradient accumulation for a larger effective batch")
            return f"even batch 1 does not fit ({self.largest_mb / 1024:.1f} GB)"
        lines = [f"largest batch that fits: {self.largest}{' (or more; the search stops there)' if self.capped else ''}"
                 f" ({self.largest_mb / 1024:.1f} GB)"]
        if (self.keep_batch, self.keep_accumulation) != (self.batch, self.accumulation):
            lines.append(f"same effective batch {self.effective}: batch {self.keep_batch} x gradient accumulation "
                         f"{self.keep_accumulation}, learning rate unchanged")
        if self.largest != self.effective:
            lines.append(f"fill the card: batch {self.largest} x accumulation 1 (effective batch {self.effective} "
                         f"-> {self.largest}), learning rate {self.learning_rate:.3g} -> "
                         f"{self.fill_learning_rate:.3g} ({self.scaling})")
        return "; ".join(lines)


def _verdict(config: ResolvedConfig, gpu: GPUInfo, batch: int) -> tuple[Fit, float]:
    # Only the training section differs; the others are shared (the estimate reads, never writes).
    candidate = config.model_copy(update={"training": config.training.model_copy(update={"batch_size": batch})})
    estimate = estimate_vram(candidate, gpu)
    return fit(estimate, gpu), estimate.total_mb


def _fits(config: ResolvedConfig, gpu: GPUInfo, batch: int) -> tuple[bool, float]:
    verdict, mb = _verdict(config, gpu, batch)
    return verdict == "fits", mb


def largest_batch(config: ResolvedConfig, gpu: GPUInfo) -> tuple[int, float]:
    """(largest batch that fits, its estimated peak in MB); (0, batch 1's peak) when none does.

    The estimate grows with the batch, so a binary search finds it in a few estimates.
    """
    ok, peak = _fits(config, gpu, 1)
    if not ok:
        return 0, peak
    low, low_mb, high = 1, peak, MAX_BATCH + 1  # low fits; high does not (or is past the cap)
    while high - low > 1:
        middle = (low + high) // 2
        ok, peak = _fits(config, gpu, middle)
        if ok:
            low, low_mb = middle, peak
        else:
            high = middle
    return low, low_mb


def _kept(effective: int, largest: int) -> tuple[int, int]:
    """(batch, accumulation) with batch x accumulation == effective and the largest batch <= largest."""
    batch = max(d for d in range(1, min(effective, largest) + 1) if effective % d == 0)
    return batch, effective // batch


def scaled_learning_rate(config: TrainConfig, batch: int) -> tuple[float, str]:
    """The learning rate for `batch` at accumulation 1, and the rule that gave it."""
    training = config.training
    effective = training.effective_batch()
    if training.optimizer == "prodigy":
        return training.learning_rate, "Prodigy adapts its own step size"
    factor = math.sqrt(batch / effective)
    return training.learning_rate * factor, f"square-root scaling: x{factor:.2f}"


def plan_batch(config: ResolvedConfig, gpu: GPUInfo | None) -> BatchPlan | None:
    """The batch plan of `config` on `gpu`; None for a CPU run (no GPU, or launch.cpu)."""
    if gpu is None or config.launch.cpu:
        return None
    training = config.training
    largest, largest_mb = largest_batch(config, gpu)
    effective = training.effective_batch()
    keep = _kept(effective, largest) if largest else (training.batch_size, training.gradient_accumulation)
    fill_lr, scaling = scaled_learning_rate(config, max(1, largest))
    return BatchPlan(
        largest=largest, capped=largest == MAX_BATCH, largest_mb=largest_mb, batch=training.batch_size,
        accumulation=training.gradient_accumulation, keep_batch=keep[0], keep_accumulation=keep[1],
        learning_rate=training.learning_rate, fill_learning_rate=fill_lr, scaling=scaling,
        one_is_tight=not largest and _verdict(config, gpu, 1)[0] == "tight",
    )
