"""model.fp8_base: the frozen denoiser's weights stored in 8-bit float (e4m3), widened layer by layer.

Each frozen Linear and Conv2d keeps its weight as float8_e4m3fn (a quarter of fp32, half of
bf16) with one scale per tensor, and widens it to the compute precision only inside its own
forward. The backward pass widens it again from the 8-bit copy instead of keeping the wide
one, so the saved activations hold no weight copies; this is what makes it compose with
gradient checkpointing. (diffusers' layerwise casting swaps the weights in place, which
gradient checkpointing's recomputation rejects, and keeps wide weights for the backward.)
LoRA layers, norms and the first and last layers stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F
import torch.nn.grad

from studio.train.memory.precision import COMPUTE_DTYPE_ATTRIBUTE

STORAGE = torch.float8_e4m3fn
# Where precision matters most and the weights are few: as diffusers' layerwise casting skips them,
# plus the UNet's first and last convolutions.
SKIPPED = ("pos_embed", "patch_embed", "norm", "^proj_in$", "^proj_out$", "^conv_in$", "^conv_out$", "lora_")


def _target_dtype(x: torch.Tensor) -> torch.dtype:
    """What the layer computes in: the autocast dtype inside autocast, else the input's."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype


def _scaled(weight: torch.Tensor, scale: float | torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The stored weight widened to `dtype`: times one scale, or a scale per output row (int8). Scaled in place:
    one wide copy of the layer at a time, not the widened weight and its scaled product side by side (the
    largest layer's pair is 324 MB for FLUX.2 [klein] 4B, a twentieth of a 6 GB card)."""
    wide = weight.to(dtype, copy=True)
    return wide.mul_(scale.to(dtype) if isinstance(scale, torch.Tensor) else scale)


class _WidenedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, scale: float | torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        dtype = _target_dtype(x)
        ctx.save_for_backward(weight)
        ctx.scale = scale
        return F.linear(x.to(dtype), _scaled(weight, scale, dtype), None if bias is None else bias.to(dtype))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        (weight,) = ctx.saved_tensors
        return grad.matmul(_scaled(weight, ctx.scale, grad.dtype)), None, None, None


class _WidenedConv2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, scale: float, bias: torch.Tensor | None,
                layout: tuple[Any, Any, Any, int]) -> torch.Tensor:
        dtype = _target_dtype(x)
        ctx.save_for_backward(weight)
        ctx.scale, ctx.layout, ctx.input_shape = scale, layout, x.shape
        stride, padding, dilation, groups = layout
        wide = _scaled(weight, scale, dtype)
        return F.conv2d(x.to(dtype), wide, None if bias is None else bias.to(dtype), stride, padding, dilation,
                        groups)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        (weight,) = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.layout
        wide = _scaled(weight, ctx.scale, grad.dtype)
        grad_input = torch.nn.grad.conv2d_input(ctx.input_shape, wide, grad, stride, padding, dilation, groups)
        return grad_input, None, None, None, None


class Float8Linear(torch.nn.Linear):
    fp8_scale: float = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _WidenedLinear.apply(x, self.weight, self.fp8_scale, self.bias)
        return out


class Float8Conv2d(torch.nn.Conv2d):
    fp8_scale: float = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layout = (self.stride, self.padding, self.dilation, self.groups)
        out: torch.Tensor = _WidenedConv2d.apply(x, self.weight, self.fp8_scale, self.bias, layout)
        return out


def _convertible(name: str, module: torch.nn.Module, skipped: tuple[str, ...]) -> bool:
    if type(module) not in (torch.nn.Linear, torch.nn.Conv2d):
        return False
    if module.weight.requires_grad or any(re.search(pattern, name) for pattern in skipped):
        return False
    return not (isinstance(module, torch.nn.Conv2d)
                and (module.padding_mode != "zeros" or isinstance(module.padding, str)))


def store_in_float8(denoiser: torch.nn.Module, compute_dtype: torch.dtype) -> list[str]:
    """Turn the frozen Linear and Conv2d layers of `denoiser` into 8-bit ones; the converted names.

    Call it after the LoRA is added (its layers are trainable and stay as they are).
    """
    skipped = SKIPPED + tuple(getattr(denoiser, "_skip_layerwise_casting_patterns", None) or ())
    converted: list[str] = []
    for name, module in list(denoiser.named_modules()):
        if not _convertible(name, module, skipped):
            continue
        weight = module.weight.detach()
        # One scale per tensor puts the largest weight at e4m3's largest value (448), so small
        # weights keep their precision instead of flushing to zero.
        amax = float(weight.abs().max().float())
        scale = amax / torch.finfo(STORAGE).max if amax > 0 else 1.0
        module.weight = torch.nn.Parameter((weight.float() / scale).to(STORAGE), requires_grad=False)
        module.__class__ = Float8Linear if isinstance(module, torch.nn.Linear) else Float8Conv2d
        module.fp8_scale = scale
        converted.append(name)
    narrow_base(denoiser, converted, compute_dtype)
    return converted


def narrow_base(denoiser: torch.nn.Module, converted: list[str], compute_dtype: torch.dtype,
                tensors: tuple[str, ...] = ("weight",)) -> None:
    """After the layers `converted` were stored in fewer bits (here, or by model.quantized_base): the
    denoiser computes in `compute_dtype`, and data parallelism leaves their `tensors` alone (every rank
    loads and narrows the same base, and gloo cannot send 8-bit floats)."""
    setattr(denoiser, COMPUTE_DTYPE_ATTRIBUTE, compute_dtype)
    ignored = [f"{name}.{tensor}" for name in converted for tensor in tensors]
    previous = list(getattr(denoiser, "_ddp_params_and_buffers_to_ignore", []))
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        denoiser, previous + ignored)
