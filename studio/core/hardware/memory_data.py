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


def lora_params(targets: dict[str, Any], rank: int, dora: bool = False) -> int:
    """Parameters of a LoRA of `rank` over the given target layers (A: in x r, B: r x out)."""
    count = rank * int(targets["in_plus_out"])
    if dora:  # one magnitude per output feature
        count += sum(int(s["out"]) * int(s["count"]) for s in targets["shapes"])
    return count


def scaled(mb_at_native: float, side: int, native: int, batch: int, bytes_: int = 4) -> float:
    """A transient counted at the native size in fp32, for another size, batch and width (linear in pixels)."""
    return mb_at_native * (side / native) ** 2 * batch * bytes_ / 4
