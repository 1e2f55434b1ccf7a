"""model.quantized_base: the frozen denoiser's Linear layers kept in int8 or 4-bit NF4.

- int8: weight-only, one fp32 scale per output row (absmax / 127), about 1 byte a weight, widened to the
  training precision layer by layer as fp8_base does (the same autograd function). Not bitsandbytes'
  `Linear8bitLt`: that one is W8A8 and casts the activations to fp16 (which bf16-trained transformers
  overflow), is slow to train through, and cannot move between devices once quantized (frozen blocks
  moved between host and GPU). A plain int8 tensor and its scales move like any weight.
- nf4: bitsandbytes' `Linear4bit` with the NF4 code (4 bits a weight, one absmax per 64 weights, itself
  stored in 8 bits), about 0.5 byte a weight, widened by bitsandbytes to run. bitsandbytes serves the
  studio's people on Windows and Linux CUDA and on the CPU (where the tests train), its layer is the one
  peft's own 4-bit LoRA wraps, and it already gives the studio its 8-bit optimizer; torchao's int4 needs
  a GPU-only kernel package.

Only the frozen Linear layers are turned (convolutions stay in the weights' dtype, as do the layers
fp8_base keeps: the first and last, embeddings, norms, and the LoRA itself). It is applied after the
adapter is added: each wrapped layer's base layer is turned, and the adapter, trained in fp32 or the
mixed precision, runs beside it; so the adapter file is the same as over the full-precision base, and
loads on it. The backward pass widens the quantized weights again instead of keeping wide copies, so it
composes with gradient checkpointing. The denoiser waits in system memory while the caches fill; then each
layer is quantized onto the training device, so the GPU never holds the base at full width, nor the
quantized layers beside the text encoders. The layers of the blocks model.blocks_to_swap keeps in system
memory go back there once quantized: the GPU never holds those blocks whole, not even while quantizing.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Sequence
from typing import Any

import torch

from studio.core.config.rules.quantized_rules import QUANTIZATION_INSTALL
from studio.train.errors import TrainError
from studio.train.memory.fp8 import SKIPPED, _WidenedLinear, narrow_base

MIN_VERSION = (0, 49)  # its CPU quantization (pyproject's cuda extra asks for the same)
INT8_MAX = 127
SCALE = "int8_scale"  # the buffer of an int8 layer's row scales
HOST = torch.device("cpu")  # where a swapped block's quantized layers wait


class Int8Linear(torch.nn.Linear):
    """A frozen Linear whose weight is int8 with one scale per output row (the `int8_scale` buffer)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _WidenedLinear.apply(x, self.weight, getattr(self, SCALE), self.bias)
        return out


def bitsandbytes() -> Any:
    """The bitsandbytes module, or a TrainError with the words that install (or upgrade) it."""
    try:
        bnb = importlib.import_module("bitsandbytes")
    except ImportError as exc:
        raise TrainError("config", f"model.quantized_base = \"nf4\" needs the bitsandbytes library, which this "
                         f"training environment lacks ({exc})", f"install it in the training environment: "
                         f"{QUANTIZATION_INSTALL}; or choose \"int8\" (no library) or \"none\"") from None
    version = str(getattr(bnb, "__version__", "0"))
    if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < MIN_VERSION:
        raise TrainError("config", f"model.quantized_base = \"nf4\" needs bitsandbytes "
                         f"{'.'.join(map(str, MIN_VERSION))} or newer; this training environment has {version}",
                         "upgrade it there: pip install -U bitsandbytes; or choose \"int8\" (no library) or \"none\"")
    return bnb


def _skipped(denoiser: torch.nn.Module) -> tuple[str, ...]:
    return SKIPPED + tuple(getattr(denoiser, "_skip_layerwise_casting_patterns", None) or ())


def _quantizable(name: str, module: torch.nn.Module, skipped: tuple[str, ...]) -> bool:
    """A plain Linear layer outside the kept ones (its weights' trainability aside)."""
    return type(module) is torch.nn.Linear and not any(re.search(pattern, name) for pattern in skipped)


def quantizable(denoiser: torch.nn.Module) -> dict[str, int]:
    """What `quantize_base` would quantize in an unadapted `denoiser`: its weights and their output rows
    (int8 keeps a scale per row). benchmarks/count_parameters.py writes it to resources/architectures/ for
    the estimate."""
    skipped = _skipped(denoiser)
    layers = [m for n, m in denoiser.named_modules() if _quantizable(n, m, skipped)]
    return {"params": sum(m.weight.numel() for m in layers), "rows": sum(m.out_features for m in layers)}


def _int8_in_place(layer: torch.nn.Linear, device: torch.device) -> None:
    """Turn `layer` into an Int8Linear on `device`: weights rounded to int8 against each row's largest."""
    wide = layer.weight.detach().to(device, torch.float32)
    scale = wide.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny) / INT8_MAX
    layer.weight = torch.nn.Parameter(torch.round(wide / scale).clamp(-INT8_MAX, INT8_MAX).to(torch.int8),
                                      requires_grad=False)
    del wide
    layer.register_buffer(SCALE, scale)
    layer.__class__ = Int8Linear
    layer.to(device)  # the bias


def _nf4_layer(bnb: Any, layer: torch.nn.Linear, compute_dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """A bitsandbytes Linear4bit holding `layer`'s weights quantized on `device`."""
    bias = layer.bias is not None
    new = bnb.nn.Linear4bit(layer.in_features, layer.out_features, bias=bias, compute_dtype=compute_dtype,
                            quant_type="nf4", device="meta")
    new.weight = bnb.nn.Params4bit(layer.weight.detach(), requires_grad=False, quant_type="nf4", module=new)
    # bitsandbytes repacks the weights for its CPU inference kernel on the first no-grad forward in eval
    # mode (a sample), in a layout its training path does not read: keep the one layout.
    new.support_avx512bf16_for_cpu = False
    if bias:
        new.bias = torch.nn.Parameter(layer.bias.detach(), requires_grad=False)
    new = new.to(device)  # quantizes the weights there
    new.train(layer.training)
    return new


class _SwappedNf4Product(torch.autograd.Function):
    """A swapped block's nf4 layer: bitsandbytes' own product, its packed weight kept for the backward as a
    saved tensor. bitsandbytes' autograd function keeps it as a plain attribute, out of reach of the
    saved-tensor hooks with which model.blocks_to_swap lets a block's GPU copy go after its forward: every
    swapped block's copy stayed on the GPU until the backward pass, and the swap saved nothing."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, layer: torch.nn.Module) -> torch.Tensor:
        ctx.save_for_backward(weight)
        ctx.quant_state, ctx.compute_dtype = weight.quant_state, layer.compute_dtype  # type: ignore[attr-defined]
        out: torch.Tensor = super(type(layer), layer).forward(x)  # type: ignore[misc]  # bitsandbytes', unrecorded
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        from bitsandbytes.functional import dequantize_4bit

        (weight,) = ctx.saved_tensors
        dtype = ctx.compute_dtype or grad.dtype
        wide = dequantize_4bit(weight, ctx.quant_state).to(dtype)
        return grad.to(dtype).matmul(wide), None, None


@functools.cache
def _swapped_nf4(linear4bit: type) -> type:
    """bitsandbytes' nf4 layer computing through `_SwappedNf4Product` (made once bitsandbytes is imported)."""

    class SwappedLinear4bit(linear4bit):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = _SwappedNf4Product.apply(x, self.weight, self)
            return out

    return SwappedLinear4bit


def quantize_base(denoiser: torch.nn.Module, kind: str, compute_dtype: torch.dtype, device: torch.device,
                  swapped: Sequence[torch.nn.Module] = (), host: torch.device = HOST) -> list[str]:
    """Turn the frozen Linear layers of `denoiser` into `kind` (int8 | nf4) ones, quantized on the training
    `device` one layer at a time; the turned names. Call it after the adapter is added (its layers are
    trainable and stay as they are), while the denoiser waits in system memory once the caches are filled:
    the rest of it follows to the device with the other frozen modules. The layers inside the `swapped`
    blocks (model.blocks_to_swap) go back to `host` once quantized, where the swap takes their copies."""
    bnb = bitsandbytes() if kind == "nf4" else None
    skipped = _skipped(denoiser)
    in_swapped = {id(m) for block in swapped for m in block.modules()}
    converted: list[str] = []
    for name, module in list(denoiser.named_modules()):
        if not _quantizable(name, module, skipped) or module.weight.requires_grad:
            continue
        turned: torch.nn.Module = module
        if bnb is None:
            _int8_in_place(module, device)
        else:
            turned = _nf4_layer(bnb, module, compute_dtype, device)
            parent_name, _, child = name.rpartition(".")
            parent = denoiser.get_submodule(parent_name) if parent_name else denoiser
            setattr(parent, child, turned)
        if id(module) in in_swapped:
            turned.to(host)
            if bnb is not None:
                turned.__class__ = _swapped_nf4(bnb.nn.Linear4bit)
        converted.append(name)
    narrow_base(denoiser, converted, compute_dtype, ("weight", SCALE) if bnb is None else ("weight",))
    return converted
