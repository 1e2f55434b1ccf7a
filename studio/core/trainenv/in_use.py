"""Who runs the training environment's Python now: a Repair must not replace packages under them.

A trainer (and each of its ranks) is the environment's `python` started by path, so the program a process
was started as names its environment; on Windows the venv's python.exe itself stays running as the parent.
A run's launcher is given `--config_file RUN_DIR/accelerate.yaml`, which names the run.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

_CONFIG_FLAG = "--config_file"


def _inside(path: str, folder: Path) -> bool:
    if not path:
        return False
    try:
        return Path(os.path.abspath(path)).is_relative_to(folder)
    except (OSError, ValueError):
        return False


def env_users(folder: Path) -> list[str]:
    """The runs (by folder name) and other processes running the environment in `folder`, in words; this
    process and those that started it are left out (a `studio-train env repair` run with the environment's
    own Python)."""
    folder = Path(os.path.abspath(folder))
    own = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        own |= {parent.pid for parent in psutil.Process().parents()}
    runs: list[str] = []
    others: list[str] = []
    for process in psutil.process_iter(["pid", "exe", "cmdline"]):
        info = process.info
        command = info.get("cmdline") or []
        if info["pid"] in own or not (_inside(info.get("exe") or "", folder) or _inside(command[0] if command else "",
                                                                                        folder)):
            continue
        if _CONFIG_FLAG in command[:-1]:
            run = f"the run {Path(command[command.index(_CONFIG_FLAG) + 1]).parent.name}"
            if run not in runs:
                runs.append(run)
        else:
            others.append(f"process {info['pid']} ({Path(command[0]).name if command else 'python'})")
    return runs + (others if not runs else [])
