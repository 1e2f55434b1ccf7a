"""model.quantized_base in the estimate: the frozen denoiser with its linear layers in int8 (a scale per row) or
bitsandbytes' nf4, the one layer widened to run, and its quantizing: the denoiser waits in system memory as loaded while
the caches fill, then its layers are quantized onto the GPU one at a time.

The counts of the layers the trainer quantizes (`quantizable`: weights and output rows) are in each
denoiser's entry of `resources/architectures/<family>.json`, written by benchmarks/count_parameters.py with
the trainer's own rule (studio/train/memory/quantized.py); the rest of the denoiser (convolutions,
embeddings, norms, the first and last layers) keeps the weights' dtype.
"""

from __future__ import annotations

from typing import Any

from studio.core.estimate.memory_data import BYTES, MB, denoiser_entry
from studio.core.estimate.memory_parts import MemoryPart, RunFacts

NF4_BLOCK = 64  # weights per absmax (Linear4bit's block size)
NF4_ABSMAX_GROUP = 256  # 8-bit absmax values per fp32 scale (Linear4bit's double quantization)
INT8_ROW_SCALE = 4  # bytes: one fp32 scale per output row (studio/train/memory/quantized.py)


def quantized_bytes(kind: str, params: int, rows: int) -> float:
    """Bytes of `params` weights in `rows` output rows stored as `kind` (int8 | nf4), with their scales."""
    if kind == "int8":
        return params + rows * INT8_ROW_SCALE
    blocks = params / NF4_BLOCK
    return params / 2 + blocks + blocks / NF4_ABSMAX_GROUP * 4  # 4-bit codes, an 8-bit absmax per block


def quantized_share(arch: dict[str, Any]) -> tuple[int, int]:
    """(weights, output rows) of the denoiser's layers the trainer quantizes."""
    counted = denoiser_entry(arch)["quantizable"]
    return int(counted["params"]), int(counted["rows"])


def stored_denoiser_mb(f: RunFacts, rest_bytes: int) -> float:
    """The frozen denoiser with its linear layers quantized, the rest (parameters and float buffers) at
    `rest_bytes` a value."""
    den = denoiser_entry(f.arch)
    params, buffers = int(den["params"]), int(den.get("float_buffers", 0))
    quantized, rows = quantized_share(f.arch)
    return (quantized_bytes(f.quantized, quantized, rows) + (params - quantized + buffers) * rest_bytes) / MB


def quantized_weights(f: RunFacts) -> MemoryPart:
    """The denoiser's weights part of a quantized base (`memory_parts.denoiser_weights` for the others)."""
    den = denoiser_entry(f.arch)
    params, label = int(den["params"]), f"{den['class']} weights"
    quantized, _ = quantized_share(f.arch)
    words = {"int8": "int8 with a scale per row", "nf4": "nf4 with an absmax per 64 (bitsandbytes)"}[f.quantized]
    return MemoryPart("weights", label, stored_denoiser_mb(f, BYTES[f.frozen]),
                      f"{params / 1e6:,.0f} M parameters: {quantized / 1e6:,.0f} M {words}, "
                      f"the rest {f.frozen} (frozen)")


def quantized_working_copy(f: RunFacts) -> MemoryPart | None:
    """A quantized layer is widened to the training precision while it runs, one layer at a time; the
    backward widens it again instead of keeping the wide copy."""
    if f.quantized == "none":
        return None
    largest = int(denoiser_entry(f.arch)["largest_layer_params"])
    return MemoryPart("quantized_widened", f"{f.quantized} layer widened to run", largest * BYTES[f.frozen] / MB,
                      f"one {f.frozen} layer at a time")
