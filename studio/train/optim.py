"""Optimizers and learning-rate schedules from the config's training section."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from studio.core.config.schema import TrainingSection
from studio.train.errors import TrainError

ParamGroups = list[dict[str, Any]]
# Below this a learning rate given to Prodigy is an AdamW-sized one (Prodigy's own is 1.0, sometimes 0.5).
PRODIGY_LOWEST_RATE = 0.1


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
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise TrainError("config", "training.optimizer = \"adamw8bit\" needs the bitsandbytes package",
                             "install it in the training environment (pip install bitsandbytes) "
                             "or choose optimizer \"adamw\"") from None
        return adamw_8bit(groups, lr, decay)
    if name == "prodigy":
        try:
            from prodigyopt import Prodigy  # type: ignore[import-untyped]
        except ImportError:
            raise TrainError("config", "training.optimizer = \"prodigy\" needs the prodigyopt package",
                             "install it in the training environment (pip install prodigyopt)") from None
        # Prodigy finds its own step size; learning_rate scales it (1.0 is the usual value).
        warn_low_prodigy_rates(groups, training, warn)
        return Prodigy(groups, lr=lr, weight_decay=decay, safeguard_warmup=training.lr_warmup_steps > 0)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(groups, lr=lr, weight_decay=decay, scale_parameter=False, relative_step=False,
                         warmup_init=False)
    raise TrainError("config", f"training.optimizer = \"{name}\" is not known",
                     "choose adamw, adamw8bit, prodigy or adafactor")


def warn_low_prodigy_rates(groups: ParamGroups, training: TrainingSection, warn: Callable[[str], None]) -> None:
    """Prodigy multiplies the step size it finds by the learning rate: an AdamW-sized rate (1e-4) makes every
    step thousands of times smaller than Prodigy's, and the run ends with weights barely moved."""
    rates = [("training.learning_rate", groups[0]["lr"])]
    if len(groups) > 1 and training.text_encoder_lr is not None:
        rates.append(("training.text_encoder_lr", groups[1]["lr"]))
    low = [f"{key} = {value:g}" for key, value in rates if value < PRODIGY_LOWEST_RATE]
    if low:
        warn(f"training.optimizer = \"prodigy\" finds its own step size and multiplies it by the learning rate: "
             f"{' and '.join(low)} makes its steps that many times smaller, and the weights barely change; "
             "set the learning rate to 1.0 (Prodigy's usual value)")


def adamw_8bit(groups: ParamGroups, lr: float, decay: float) -> torch.optim.Optimizer:
    """bitsandbytes' 8-bit AdamW, stepping without waiting for the GPU after each parameter.

    bitsandbytes waits for the whole GPU after updating each parameter (its paged state needs that): a LoRA's
    hundreds of small tensors made hundreds of waits a step, and the CPU could not queue the next step meanwhile.
    The studio's state is not paged and its kernels run in the same stream as the training step, so the
    order of the updates on the GPU is kept without them.
    """
    import bitsandbytes as bnb
    from bitsandbytes.optim import optimizer as bnb_optimizer

    class AdamW8bit(bnb.optim.AdamW8bit):
        def step(self, closure: Any = None) -> Any:
            wait = bnb_optimizer.sync_gpu
            bnb_optimizer.sync_gpu = lambda t: None
            try:
                return super().step(closure)
            finally:
                bnb_optimizer.sync_gpu = wait

    return AdamW8bit(groups, lr=lr, weight_decay=decay)


def build_scheduler(optimizer: torch.optim.Optimizer, training: TrainingSection, total_steps: int,
                    warn: Callable[[str], None] = print) -> Any:
    from diffusers.optimization import get_scheduler

    warmup = training.lr_warmup_steps
    if warmup and warmup >= total_steps:
        # The warm-up rises by 1/warmup a step: a run no longer than it ends below the rate it was given.
        warn(f"training.lr_warmup_steps = {warmup} is not below this run's {total_steps} steps: the learning "
             f"rate rises for the whole run and never reaches training.learning_rate "
             f"({training.learning_rate:g}); lower the warm-up (a tenth of the steps is usual) or train longer")
    if training.lr_scheduler == "cosine_with_restarts" and training.lr_cycles == 1:
        warn("training.lr_scheduler = \"cosine_with_restarts\" with training.lr_cycles = 1 never restarts (it is "
             "the cosine schedule): set training.lr_cycles to the number of cycles, 3 say")
    return get_scheduler(
        training.lr_scheduler, optimizer=optimizer,
        num_warmup_steps=training.lr_warmup_steps, num_training_steps=max(1, total_steps),
        # Each schedule reads its own: cosine_with_restarts its cycles (one would be plain cosine), polynomial its
        # power (1 would be the linear schedule).
        num_cycles=training.lr_cycles, power=training.lr_power,
    )
