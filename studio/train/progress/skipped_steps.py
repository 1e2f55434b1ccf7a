"""Optimizer steps that fp16's gradient scaler skipped: counted for the run's summary, and a run whose steps
are all skipped is stopped.

Under fp16 mixed precision the loss is scaled up before the backward pass so that small gradients survive
in 16 bits; a step whose gradients come out inf or NaN is skipped (the weights stay as they were) and the
scale is halved. A few skipped steps while the scale settles are normal. A run whose every step is skipped
trains nothing, while its loss plot (measured before each update) looks alive to the person watching it.
"""

from __future__ import annotations

from typing import Any

import torch

from studio.train.errors import TrainError

# Skipped steps in a row that stop the run: the scale has fallen 2**25-fold by then (from its start of 65536 to
# below 0.002), so the gradients are inf or NaN at any scale and no later step would train either.
SKIPPED_IN_A_ROW_LIMIT = 25


class SkippedSteps:
    """The steps the gradient scaler skipped in this leg (the same on every rank: their gradients are the same).

    A skipped step halves the scaler's scale, so a step is known skipped by its scale after the update being
    below the one before, compared on the device: the studio's fused AdamW skips inside its kernel, where
    accelerate's `optimizer_step_was_skipped` never sees it, and reading the answer back every step would stall
    the GPU. The step meter brings the answers back with the losses.
    """

    def __init__(self) -> None:
        self.count = 0
        self.in_a_row = 0
        self.first_in_row = 0

    @staticmethod
    def scale_before(accelerator: Any) -> torch.Tensor | None:
        """The scaler's scale before the optimizer step, on the device (None without a scaler: no step is skipped)."""
        scaler = getattr(accelerator, "scaler", None)
        scale = scaler._get_scale_async() if scaler is not None else None  # the tensor itself, without a read-back
        return None if scale is None else scale.detach().clone()

    @staticmethod
    def was_skipped(accelerator: Any, before: torch.Tensor | None) -> torch.Tensor | None:
        """After the step: whether it was skipped, as a device tensor for the step meter."""
        if before is None:
            return None
        return accelerator.scaler._get_scale_async() < before

    def record(self, steps: list[int], skipped: set[int]) -> None:
        """The steps of a read-back, in order, and those of them that were skipped."""
        for step in steps:
            if step not in skipped:
                self.in_a_row = 0
                continue
            self.count += 1
            if self.in_a_row == 0:
                self.first_in_row = step
            self.in_a_row += 1

    @property
    def hopeless(self) -> bool:
        return self.in_a_row >= SKIPPED_IN_A_ROW_LIMIT

    def error(self) -> TrainError:
        last = self.first_in_row + self.in_a_row - 1
        return TrainError(
            "nan",
            f"fp16 mixed precision skipped every optimizer step from step {self.first_in_row} to {last} "
            f"({self.in_a_row} in a row): their gradients held inf or NaN values, so those steps left the weights "
            "as they were and the run trained nothing (the loss shown is measured before each update)",
            "set training.mixed_precision = \"bf16\" (RTX 30 series, A100 and newer) or \"no\", or lower "
            "training.learning_rate")
