"""The data the VRAM estimate reads: architecture sizes and the measured calibration.

`resources/architectures/<family>.json` holds parameter counts, LoRA target shapes and
the activations and transients counted on the meta device by
`benchmarks/count_parameters.py`; `calibration.json` holds how those counts become a
peak on a GPU (fitted to the NVML peaks in `gpu_peaks.json`) and on the CPU (peak RSS).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from studio.core.resources import resource_path

MB = 1024 * 1024
BYTES = {"fp8": 1, "fp32": 4, "fp16": 2, "bf16": 2}


class ArchitectureDataError(RuntimeError):
    """The shipped architecture data is missing or damaged (a broken install)."""


@lru_cache(maxsize=8)
def load_architecture(family: str) -> dict[str, Any]:
    return read_resource_json("architectures", f"{family}.json")


@lru_cache(maxsize=1)
def load_calibration() -> dict[str, Any]:
    return read_resource_json("architectures", "calibration.json")


@lru_cache(maxsize=1)
def load_gpu_peaks() -> dict[str, Any]:
    """The measured GPU peaks the calibration is checked against (date, GPU, software, cases)."""
    return read_resource_json("architectures", "gpu_peaks.json")


def read_resource_json(*parts: str) -> dict[str, Any]:
    path = resource_path(*parts)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArchitectureDataError(
            f"{path}: cannot be read ({exc}); reinstall the studio or run benchmarks/count_parameters.py"
        ) from None
    if not isinstance(data, dict):
        raise ArchitectureDataError(f"{path}: must hold a JSON object")
    return data


def denoiser_entry(arch: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in arch["components"].values() if c["role"] == "denoiser")


def lora_params(targets: dict[str, Any], rank: int, dora: bool = False, network: str = "lora",
                factor: int | None = None) -> int:
    """Parameters of an adapter of `rank` over the given target layers: a LoRA (A: in x r, B: r x out), a LoHa
    (two such pairs) or a LoKr (the Kronecker factors peft makes of each layer's shape)."""
    if network == "loha":
        return 2 * rank * int(targets["in_plus_out"])
    if network == "lokr":
        return sum(_lokr_layer(int(s["in"]), int(s["out"]), rank, factor or -1) * int(s["count"])
                   for s in targets["shapes"])
    count = rank * int(targets["in_plus_out"])
    if dora:  # one magnitude per output feature
        count += sum(int(s["out"]) * int(s["count"]) for s in targets["shapes"])
    return count


def _lokr_layer(inputs: int, outputs: int, rank: int, factor: int) -> int:
    """A LoKr layer as peft shapes it: a whole small factor, and the large one whole or of rank `rank`."""
    in_m, in_n = factorization(inputs, factor)
    out_l, out_k = factorization(outputs, factor)
    small = out_l * in_m
    large = out_k * in_n if rank >= max(out_k, in_n) / 2 else rank * (out_k + in_n)
    return small + large


def factorization(dimension: int, factor: int = -1) -> tuple[int, int]:
    """Two factors of `dimension`, the smaller first: `factor` itself when it divides it, else the pair
    nearest its square root whose smaller side is at most `factor` (LyCORIS's and peft's rule)."""
    if factor > 0 and dimension % factor == 0:
        return factor, dimension // factor
    limit = dimension if factor == -1 else factor
    m, n = 1, dimension
    while m < n:
        new_m = m + 1
        while dimension % new_m:
            new_m += 1
        new_n = dimension // new_m
        if new_m + new_n > m + n or new_m > limit:
            break
        m, n = new_m, new_n
    return min(m, n), max(m, n)


def scaled(mb_at_native: float, side: int, native: int, batch: int, bytes_: int = 4) -> float:
    """A transient counted at the native size in fp32, for another size, batch and width (linear in pixels)."""
    return mb_at_native * (side / native) ** 2 * batch * bytes_ / 4
