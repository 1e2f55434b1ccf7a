"""Errors the trainer reports as an `error` event (kind, message, hint) before it exits non-zero."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

# The disk (or the person's quota on it) is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class TrainError(Exception):
    """A failure a person can act on: `kind` is oom, config, data, nan, model, checkpoint, disk_full or crash."""

    def __init__(self, kind: str, message: str, hint: str = "", path: str | None = None,
                 needed_bytes: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint
        self.path = path
        self.needed_bytes = needed_bytes


# How libraries that are not Python (safetensors' Rust writer) word ENOSPC and EDQUOT in their messages.
_DISK_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "StorageFull", "os error 28", "os error 122")


def is_disk_full(exc: BaseException) -> bool:
    """An error that says the disk is full (ENOSPC or EDQUOT), itself or in what caused it."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FULL_ERRNOS:
            return True
        if not isinstance(seen, OSError) and any(word in str(seen) for word in _DISK_FULL_WORDS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def free_bytes(folder: Path) -> int | None:
    """Free space on the disk holding `folder` (or its nearest existing parent); None if unknown."""
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def out_of_space(exc: BaseException, folder: Path, needed_bytes: int = 2**20) -> bool:
    """Did a failed write fail for want of space? torch's writer reports a full disk as a RuntimeError
    ("unexpected pos", "iostream error"), so a disk with less free space than the write needed counts too."""
    if is_disk_full(exc):
        return True
    free = free_bytes(folder)
    return free is not None and free < needed_bytes


def megabytes(count: int) -> str:
    return f"{count / 2**20:,.0f} MB" if count >= 2**20 else f"{count / 1024:,.0f} KB"


def disk_full_error(folder: Path, needed_bytes: int | None, what: str) -> TrainError:
    """The disk holding `folder` is full: say where, how much is free and about how much `what` needs."""
    available = free_bytes(folder)
    free = f"{megabytes(available)} free" if available is not None else "free space unknown"
    need = f", about {megabytes(needed_bytes)} needed" if needed_bytes else ""
    return TrainError(
        "disk_full", f"the disk holding {folder} is full while writing {what} ({free}{need})",
        "free space on that disk or set output.dir to a folder on a larger one, then continue with "
        "`studio-train resume RUN_DIR` (the Resume button): the checkpoints written before are intact",
        path=str(folder), needed_bytes=needed_bytes,
    )


def oom_hint(batch_size: int, resolution: int, gradient_checkpointing: bool, estimate: str = "") -> str:
    """What to lower after CUDA ran out of memory, most effective first."""
    steps = []
    if batch_size > 1:
        steps.append(f"training.batch_size ({batch_size}; raise gradient_accumulation to keep the effective batch)")
    if not gradient_checkpointing:
        steps.append("turn on training.gradient_checkpointing")
    steps.append(f"dataset.resolution ({resolution})")
    steps.append("training.mixed_precision = \"bf16\" or \"fp16\", and training.cache_latents")
    text = "lower or change: " + "; ".join(steps)
    return f"{text}. {estimate}".strip() if estimate else text


def vram_estimate_text(config: object, run_dir: Path, device_index: int = 0) -> str:
    """The studio's VRAM estimate for this config (its run folder's, paths resolved against `run_dir`)
    on this GPU, as one sentence ("" if unknown)."""
    try:
        import torch

        from studio.core.config.paths import resolve_paths
        from studio.core.config.schema import TrainConfig
        from studio.core.estimate.estimate import estimate_vram
        from studio.core.hardware.report import GPUInfo

        if not isinstance(config, TrainConfig) or not torch.cuda.is_available():
            return ""
        props = torch.cuda.get_device_properties(device_index)
        total = props.total_memory // 2**20
        gpu = GPUInfo(index=device_index, name=props.name, total_mb=total, free_mb=total)
        needed = estimate_vram(resolve_paths(config, run_dir), gpu).total_mb
    except Exception:  # an estimate is a courtesy; the hint stands without it
        return ""
    return f"The studio estimates {needed / 1024:.1f} GB for this config; the GPU has {total / 1024:.1f} GB."
