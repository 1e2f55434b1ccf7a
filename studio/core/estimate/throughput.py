"""Model FLOPs of a training step and the GPU's peak: images/s turned into TFLOP/s and MFU.

The forward FLOPs per image of each family's denoiser at its native size are counted
on the meta device by `benchmarks/count_flops.py` (resources/architectures/flops.json);
other sizes scale with the pixels. A LoRA step costs two forwards (the forward and the
activation gradients), gradient checkpointing one more (the recomputed forward), a full
fine-tune one more (the weight gradients). Peaks are the dense bf16/fp16 tensor figures
in resources/gpu_peaks.toml. Pure Python: no torch.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from studio.core.resources import resource_path

# A loaded denoiser is the family's published architecture when its parameter count is this close.
PARAMS_TOLERANCE = 0.005


class ThroughputDataError(RuntimeError):
    """The shipped FLOP counts or GPU peaks are missing or damaged (a broken install)."""


@dataclass(frozen=True)
class GpuPeak:
    name: str
    tflops: float  # dense bf16/fp16 TFLOP/s that MFU is measured against
    basis: str
    bf16: bool = True


@lru_cache(maxsize=1)
def load_flops() -> dict[str, Any]:
    path = resource_path("architectures", "flops.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        families = data["families"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ThroughputDataError(f"{path}: cannot be read ({exc}); reinstall the studio or run "
                                  "benchmarks/count_flops.py") from None
    if not isinstance(families, dict):
        raise ThroughputDataError(f"{path}: 'families' must be a table of families")
    return families


@lru_cache(maxsize=1)
def load_peaks() -> list[tuple[re.Pattern[str], GpuPeak]]:
    path = resource_path("gpu_peaks.toml")
    try:
        rows = tomllib.loads(path.read_text(encoding="utf-8"))["gpu"]
        return [(re.compile(row["match"], re.IGNORECASE),
                 GpuPeak(str(row["name"]), float(row.get("measured", row["tflops"])), str(row.get("basis", "")),
                         bool(row.get("bf16", True))))
                for row in rows]
    except (OSError, ValueError, KeyError, TypeError, re.error) as exc:
        raise ThroughputDataError(f"{path}: cannot be read ({exc}); reinstall the studio") from None


def gpu_peak(gpu_name: str) -> GpuPeak | None:
    """The dense bf16/fp16 peak of the GPU named `gpu_name` (as the driver names it), if listed."""
    for pattern, peak in load_peaks():
        if pattern.search(gpu_name):
            return peak
    return None


def forward_tflop(family: str, width: int, height: int) -> float:
    """Forward TFLOP of one image of `width` x `height` pixels (scaled by pixels from the native size)."""
    entry = load_flops()[family]
    native = int(entry["resolution"])
    return float(entry["forward_tflop"]) * (width * height) / (native * native)


def is_counted_architecture(family: str, denoiser_params: int) -> bool:
    """Whether a denoiser of `denoiser_params` parameters is the architecture the FLOP count is for.

    A different model of the family (SD 3.5 large, a tiny test model) has other FLOPs: no figure
    beats a wrong one.
    """
    entry = load_flops().get(family)
    if entry is None:
        return False
    counted = int(entry["params"])
    return abs(denoiser_params - counted) <= PARAMS_TOLERANCE * counted


def step_multiplier(full_finetune: bool, gradient_checkpointing: bool, checkpointing_interval: int = 1) -> float:
    """Forward passes a training step costs: 2 for LoRA (forward + activation gradients), plus the
    recomputed share of a forward with gradient checkpointing, plus 1 for the weight gradients of
    a full fine-tune."""
    recomputed = 1.0 / max(1, checkpointing_interval) if gradient_checkpointing else 0.0
    return 2.0 + recomputed + (1.0 if full_finetune else 0.0)


def mfu(tflops_per_gpu: float, peak: GpuPeak | None, precision: str) -> float | None:
    """Model FLOPs utilisation: achieved TFLOP/s over the GPU's peak; None without a peak or
    for a precision the peak does not describe (fp32 training, bf16 on a card without it)."""
    if peak is None or precision not in ("fp16", "bf16") or (precision == "bf16" and not peak.bf16):
        return None
    return tflops_per_gpu / peak.tflops
