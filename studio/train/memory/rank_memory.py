"""Memory of every rank, gathered to rank 0 for the step events."""

from __future__ import annotations

import math
import os

import psutil
import torch

from studio.core.runs.events import RankMemory

_MB = 1024 * 1024


def local_memory(device: torch.device) -> list[float]:
    """[allocated, reserved, peak, rss] in MB for this process (NaN where it does not apply)."""
    rss = psutil.Process(os.getpid()).memory_info().rss / _MB
    if device.type == "cuda":
        return [
            torch.cuda.memory_allocated(device) / _MB,
            torch.cuda.memory_reserved(device) / _MB,
            torch.cuda.max_memory_allocated(device) / _MB,
            rss,
        ]
    return [math.nan, math.nan, math.nan, rss]


def memory_row(device: torch.device) -> list[float]:
    """This rank's memory as numbers to gather: [allocated, reserved, peak, rss, device index]."""
    return [*local_memory(device), float(device.index or 0)]


def memory_of_ranks(rows: list[list[float]]) -> list[RankMemory]:
    """Gathered `memory_row`s, one per rank in rank order, as the step event's memory."""
    out = []
    for rank, (allocated, reserved, peak, rss, index) in enumerate(rows):
        cuda = not math.isnan(allocated)
        out.append(RankMemory(
            rank=rank,
            device=f"cuda:{int(index)}" if cuda else "cpu",
            allocated_mb=round(allocated, 1) if cuda else None,
            reserved_mb=round(reserved, 1) if cuda else None,
            peak_mb=round(peak, 1) if cuda else None,
            rss_mb=round(rss, 1),
        ))
    return out
