"""Gradient checkpointing of the denoiser, of every block or of every N-th (training.checkpointing_interval).

diffusers hands each checkpointable unit (a UNet block's resnets and transformer blocks,
SD3's transformer blocks) to the model's checkpoint function in forward order. The
function here recomputes every N-th of them and runs the others plainly: their
activations stay in memory and their forward is not repeated in the backward pass.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.checkpoint


class EveryNthBlock:
    """A checkpoint function for diffusers models that checkpoints blocks 0, N, 2N... in forward order.

    Each block's choice is made the first time it runs and kept, so the backward pass's
    recomputation and every later step take the same decision for it.
    """

    def __init__(self, interval: int) -> None:
        self.interval = max(1, interval)
        self.checkpointed: dict[int, bool] = {}

    def __call__(self, block: Any, *args: Any) -> Any:
        key = id(block)
        chosen = self.checkpointed.get(key)
        if chosen is None:
            chosen = self.checkpointed[key] = len(self.checkpointed) % self.interval == 0
        if chosen:
            return torch.utils.checkpoint.checkpoint(block.__call__, *args, use_reentrant=False)
        return block(*args)


def enable_gradient_checkpointing(denoiser: torch.nn.Module, interval: int) -> None:
    """Turn on the denoiser's gradient checkpointing for every `interval`-th block (1: all)."""
    enable: Any = denoiser.enable_gradient_checkpointing  # a diffusers ModelMixin method
    enable(gradient_checkpointing_func=EveryNthBlock(interval))
