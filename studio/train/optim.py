"""Optimizers and learning-rate schedules from the config's training section."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from studio.core.config.schema import TrainingSection
from studio.train.errors import TrainError

ParamGroups = list[dict[str, Any]]


def param_groups(
    denoiser_params: list[torch.nn.Parameter], encoder_params: list[torch.nn.Parameter], training: TrainingSection
) -> ParamGroups:
    groups: ParamGroups = [{"params": denoiser_params, "lr": training.learning_rate}]
    if encoder_params:
        groups.append({"params": encoder_params, "lr": training.text_encoder_lr or training.learning_rate})
    return groups


def build_optimizer(
    groups: ParamGroups, training: TrainingSection, cuda: bool, warn: Callable[[str], None] = print
) -> torch.optim.Optimizer:
    name = training.optimizer
    lr, decay = training.learning_rate, training.weight_decay
    if name == "adamw8bit" and not cuda:
        # bitsandbytes' 8-bit state lives on CUDA only; the same recipe trains with full AdamW state.
        warn("training.optimizer = \"adamw8bit\" needs a CUDA GPU; this run uses AdamW (more memory, "
             "the same steps)")
        name = "adamw"
    if name == "adamw":
        # One fused kernel per step, on CUDA and on the CPU alike: the multi-tensor path launches
        # several kernels per parameter and reads every parameter's step count back to the host
        # (`step.item()`), a wait inside the step (tests/train/test_step_op_count.py).
        return torch.optim.AdamW(groups, lr=lr, weight_decay=decay, fused=True)
    if name == "adamw8bit":
        try:
            import bitsandbytes as bnb  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise TrainError("config", "training.optimizer = \"adamw8bit\" needs the bitsandbytes package",
                             "install it in the training environment (pip install bitsandbytes) "
                             "or choose optimizer \"adamw\"") from None
        return bnb.optim.AdamW8bit(groups, lr=lr, weight_decay=decay)
    if name == "prodigy":
        try:
            from prodigyopt import Prodigy  # type: ignore[import-untyped]
        except ImportError:
            raise TrainError("config", "training.optimizer = \"prodigy\" needs the prodigyopt package",
                             "install it in the training environment (pip install prodigyopt)") from None
        # Prodigy finds its own step size; learning_rate scales it (1.0 is the usual value).
        return Prodigy(groups, lr=lr, weight_decay=decay, safeguard_warmup=training.lr_warmup_steps > 0)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(groups, lr=lr, weight_decay=decay, scale_parameter=False, relative_step=False,
                         warmup_init=False)
    raise TrainError("config", f"training.optimizer = \"{name}\" is not known",
                     "choose adamw, adamw8bit, prodigy or adafactor")


def build_scheduler(optimizer: torch.optim.Optimizer, training: TrainingSection, total_steps: int) -> Any:
    from diffusers.optimization import get_scheduler

    return get_scheduler(
        training.lr_scheduler, optimizer=optimizer,
        num_warmup_steps=training.lr_warmup_steps, num_training_steps=max(1, total_steps),
    )
