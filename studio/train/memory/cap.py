"""A hard cap on the trainer's GPU memory, so a preset's promise can be proven on a larger card.

`STUDIO_GPU_CAP_MB=7600` makes the CUDA caching allocator of every rank refuse to hold more
than 7,600 MB (`torch.cuda.set_per_process_memory_fraction`): a run that would need more on an
8 GB card fails here with the same out-of-memory error, even on a 141 GB one. The CUDA context
and the libraries' own workspaces are outside the allocator, so a proof of "fits in N GB"
caps at N GB minus the context (benchmarks/gpu_acceptance.py --cap).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from studio.train.errors import TrainError

CAP_ENV = "STUDIO_GPU_CAP_MB"


def cap_mb(environ: dict[str, str] | os._Environ[str] = os.environ) -> float | None:
    text = environ.get(CAP_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise TrainError("config", f"{CAP_ENV}={text!r} is not a positive number of megabytes",
                         f"set {CAP_ENV} to the MB the trainer may use on the GPU (e.g. 7600), or unset it")
    return value


def apply_gpu_cap(device: torch.device, warn: Callable[..., None]) -> float | None:
    """Cap this rank's allocator at STUDIO_GPU_CAP_MB; the cap in MB, or None when there is none."""
    cap = cap_mb()
    if cap is None:
        return None
    if device.type != "cuda":
        warn(f"{CAP_ENV} is set, but this run trains on the {device.type.upper()}: nothing is capped")
        return None
    index = cuda_index(device, torch.cuda.current_device)
    total_mb = torch.cuda.get_device_properties(index).total_memory / 2**20
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total_mb), index)
    warn(f"GPU memory capped at {cap:,.0f} MB of the card's {total_mb:,.0f} MB by {CAP_ENV}: "
         "the run fails with out of memory where a card of that size would")
    return cap


def cuda_index(device: torch.device, current: Callable[[], int]) -> int:
    """The GPU's number: accelerate's device is plain "cuda" (the rank's current GPU), which the
    memory-fraction call refuses."""
    return device.index if device.index is not None else current()
