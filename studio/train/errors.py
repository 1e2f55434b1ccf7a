"""Errors the trainer reports as an `error` event (kind, message, hint) before it exits non-zero."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from pathlib import Path

from studio.core.app_words import command_or_action

# The disk (or the person's quota on it) is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# File systems that hold no file of 4 GB or more (FAT32, as psutil and the OS name it).
FAT_FILE_SYSTEMS = frozenset({"vfat", "msdos", "fat", "fat32", "FAT", "FAT32"})
FAT_FILE_LIMIT = 2**32 - 1


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


# How safetensors' Rust writer words EFBIG (a file over the file system's or the process's file-size limit).
_TOO_LARGE_WORDS = ("File too large", "os error 27", "FileTooLarge")


def is_file_too_large(exc: BaseException) -> bool:
    """An error that says a file grew past a file-size limit (EFBIG), itself or in what caused it."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.EFBIG:
            return True
        if not isinstance(seen, OSError) and any(word in str(seen) for word in _TOO_LARGE_WORDS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def file_size_limit(folder: Path) -> int | None:
    """The largest file this process may write into `folder`: the file-size limit (ulimit -f) or the
    4 GB of a FAT32 disk, whichever is smaller; None when neither limits it (or it is unknown)."""
    limits = []
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and soft > 0:
            limits.append(int(soft))
    except (ImportError, OSError, ValueError):  # Windows has no resource module
        pass
    if _file_system(folder) in FAT_FILE_SYSTEMS:
        limits.append(FAT_FILE_LIMIT)
    return min(limits) if limits else None


def _file_system(folder: Path) -> str:
    """The file system type of the disk holding `folder` ("ext4", "vfat", "NTFS"...), "" if unknown."""
    try:
        import psutil

        real = os.path.realpath(_existing(folder))
        mounts = [p for p in psutil.disk_partitions(all=True)
                  if real == p.mountpoint or real.startswith(p.mountpoint.rstrip(os.sep) + os.sep)]
    except Exception:  # psutil missing or the mount table unreadable: no limit is assumed
        return ""
    return max(mounts, key=lambda p: len(p.mountpoint)).fstype if mounts else ""


def _existing(folder: Path) -> Path:
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


def free_bytes(folder: Path) -> int | None:
    """Free space on the disk holding `folder` (or its nearest existing parent); None if unknown."""
    try:
        return shutil.disk_usage(_existing(folder)).free
    except OSError:
        return None


def out_of_space(exc: BaseException, folder: Path, needed_bytes: int = 2**20) -> bool:
    """Did a failed write fail for want of space? torch's writer reports a full disk as a RuntimeError
    ("unexpected pos", "iostream error"), so a disk with less free space than the write needed counts too."""
    if is_disk_full(exc):
        return True
    free = free_bytes(folder)
    return free is not None and free < needed_bytes


def write_failure(exc: BaseException, folder: Path, needed_bytes: int | None, what: str) -> TrainError | None:
    """The error a person can act on when writing `what` into `folder` failed with `exc`: a full disk, or
    a file larger than the disk's file system (FAT32) or the file-size limit takes; None for anything else.

    torch's writer says neither (a RuntimeError "unexpected pos"), so with free space left, a file-size
    limit smaller than what the write needed counts as the cause."""
    if is_disk_full(exc):
        return disk_full_error(folder, needed_bytes, what)
    too_long = windows_path_too_long(exc)
    if too_long is not None:
        return path_too_long_error(too_long, what)
    if is_file_too_large(exc):
        return file_too_large_error(folder, what)
    if not isinstance(exc, OSError):
        limit = file_size_limit(folder)
        if limit is not None and needed_bytes is not None and needed_bytes >= limit:
            return file_too_large_error(folder, what, limit)
    if out_of_space(exc, folder, needed_bytes or 2**20):
        return disk_full_error(folder, needed_bytes, what)
    return None


# The longest path Windows opens (260 with its closing NUL) unless its long paths are turned on; a folder 12 less.
WINDOWS_MAX_PATH = 259
WINDOWS_MAX_FOLDER = 247
# How torch's own file writer (checkpoints' optimizer.bin) says it could not open a file or find its folder.
_TORCH_CANNOT_OPEN = re.compile(r"^(?:File (.+) cannot be opened|Parent directory (.+) does not exist)\.")


def windows_path_too_long(exc: BaseException) -> str | None:
    """On Windows, the path an error names when it is longer than Windows opens with its long paths turned off (it
    then says "The system cannot find the path specified", of a folder that is there); None otherwise."""
    if sys.platform != "win32":
        return None
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            names = [seen.filename, seen.filename2]
        else:
            match = _TORCH_CANNOT_OPEN.search(str(seen))
            names = [match.group(1) or match.group(2)] if match else []
        for name in names:
            if isinstance(name, str) and name:
                path = os.path.abspath(name)
                if len(path) > WINDOWS_MAX_PATH or (len(path) > WINDOWS_MAX_FOLDER and not os.path.splitext(path)[1]):
                    return path
        seen = seen.__cause__ or seen.__context__
    return None


def path_too_long_error(path: str, what: str) -> TrainError:
    """`what` could not be written: its `path` is longer than Windows allows with its long paths turned off."""
    return TrainError(
        "config", f"{what} cannot be written: the path {path} is {len(path)} characters long, more than Windows "
        f"allows unless its long paths are turned on ({WINDOWS_MAX_PATH} for a file, {WINDOWS_MAX_FOLDER} for a "
        "folder)",
        "turn on Windows' long paths (an administrator's setting, LongPathsEnabled) and continue with "
        f"{_resume()}; or set output.dir to a short folder (such as C:\\runs) and a shorter output.name, and "
        "start the run again", path=path)


def file_too_large_error(folder: Path, what: str, limit: int | None = None) -> TrainError:
    """A file of `what` grew past the largest file the disk holding `folder` or this process may write."""
    limit = limit if limit is not None else file_size_limit(folder)
    size = f" (the limit here is {megabytes(limit)})" if limit is not None else ""
    return TrainError(
        "disk_full", f"{what} cannot be written into {folder}: one of its files is larger than the disk's file "
        f"system or this process's file-size limit allows{size} (File too large)",
        "set output.dir to a folder on a disk whose file system takes files over 4 GB (NTFS, ext4, exFAT, "
        "APFS, not FAT32), or raise the file-size limit (`ulimit -f unlimited` in the shell that starts the "
        f"training), then continue with {_resume()}: the checkpoints written before are intact",
        path=str(folder),
    )


def _resume() -> str:
    """How a run stopped by a full disk goes on, where the person reads it."""
    return command_or_action("`studio-train resume RUN_DIR` (the Resume button)", "Resume on the Train or Runs page")


def megabytes(count: int) -> str:
    return f"{count / 2**20:,.0f} MB" if count >= 2**20 else f"{count / 1024:,.0f} KB"


def disk_full_error(folder: Path, needed_bytes: int | None, what: str) -> TrainError:
    """The disk holding `folder` is full: say where, how much is free and about how much `what` needs."""
    available = free_bytes(folder)
    free = f"{megabytes(available)} free" if available is not None else "free space unknown"
    need = f", about {megabytes(needed_bytes)} needed" if needed_bytes else ""
    return TrainError(
        "disk_full", f"the disk holding {folder} is full while writing {what} ({free}{need})",
        f"free space on that disk or set output.dir to a folder on a larger one, then continue with {_resume()}: "
        "the checkpoints written before are intact",
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

        from studio.core.config.files.paths import resolve_paths
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
