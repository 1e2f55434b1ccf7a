"""The precision a denoiser computes in, and its inputs handed to it in that precision.

Pipelines make latents and conditioning in the text encoders' dtype, and a run mixes
dtypes freely: frozen bf16/fp16 encoders and VAE, a trained fp32 denoiser (DreamBooth),
8-bit stored weights (model.fp8_base), autocast around the forward. Two half types
meeting in one autocast op (fp16 conditioning, bf16 activations) fail on every device,
so the inputs are brought to the one dtype the forward computes in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

# Set on a denoiser whose weights are stored in 8 bits: the dtype its layers widen to.
COMPUTE_DTYPE_ATTRIBUTE = "fp8_compute_dtype"


def compute_dtype(module: torch.nn.Module) -> torch.dtype:
    """The dtype a denoiser's weights compute in: what 8-bit layers widen to, else its first floating weight's.

    A data-parallel wrapper is looked through.
    """
    inner = getattr(module, "module", module)
    widened = getattr(inner, COMPUTE_DTYPE_ATTRIBUTE, None)
    if isinstance(widened, torch.dtype):
        return widened
    for parameter in inner.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.float32


def input_dtype(module: torch.nn.Module, device: torch.device) -> torch.dtype:
    """The dtype a denoiser's inputs should have now: autocast's inside autocast, else its compute dtype."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return compute_dtype(module)


def cast_inputs(value: Any, dtype: torch.dtype) -> Any:
    """Floating tensors of two or more dimensions in `dtype`; timesteps (0-D and 1-D) keep their precision."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.ndim >= 2 else value
    if isinstance(value, dict):
        return {key: cast_inputs(item, dtype) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cast_inputs(item, dtype) for item in value)
    return value


@contextlib.contextmanager
def forward_in_precision(
    denoiser: torch.nn.Module, autocast: Callable[[], contextlib.AbstractContextManager[Any]]
) -> Iterator[None]:
    """Inside the block, every call of `denoiser` (by a pipeline) runs in the run's autocast with its inputs
    in `input_dtype`, whether or not accelerate has wrapped its forward yet (DreamBooth class images come
    before). Only the forward: the pipeline's own steps keep their dtypes (two half types in one
    autocast op fail)."""
    own = "forward" in vars(denoiser)
    original = denoiser.forward
    device = next(denoiser.parameters()).device

    def forward(*args: Any, **kwargs: Any) -> Any:
        with autocast():
            dtype = input_dtype(denoiser, device)
            return original(*cast_inputs(args, dtype), **cast_inputs(kwargs, dtype))

    denoiser.forward = forward
    try:
        yield
    finally:
        if own:
            denoiser.forward = original
        else:
            del denoiser.forward
