"""Run folders: `<output.dir>/<YYYYmmdd-HHMMSS>-<name>/` and the files in them."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

CONFIG_FILE = "config.toml"
ACCELERATE_FILE = "accelerate.yaml"
COMMAND_FILE = "command.txt"
EVENTS_FILE = "events.jsonl"
CONSOLE_FILE = "console.log"
STOP_FILE = "STOP"
# When the studio (or studio-train) launched the trainer, in UNIX seconds: a STOP older than that is the leg
# before's, a newer one a Stop pressed while the trainer starts.
LAUNCHED_ENV = "STUDIO_LAUNCHED_AT"
SAMPLES_DIR = "samples"
CHECKPOINTS_DIR = "checkpoints"
OUTPUT_DIR = "output"
# Held by the trainer while it trains the run: pid, host and start (see studio.core.runs.scheduling.lock).
LOCK_FILE = "trainer.lock"
# Written by the studio when it starts a trainer: {"pid": N, "create_time": T}.
PROCESS_FILE = "process.json"
# The record of a run that runs (or ran) on another machine, or was copied back from one.
REMOTE_FILE = "remote.json"
# The record of a run launched on a cloud cluster (core/cloud/run.py): its cluster, job and state.
CLOUD_FILE = "cloud.json"


def new_run_dir(output_dir: str | Path, name: str, now: _dt.datetime | None = None) -> Path:
    """Create and return a fresh run folder; a clash in the same second gets a suffix."""
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = Path(output_dir)
    base.mkdir(parents=True, exist_ok=True)
    candidate = base / f"{stamp}-{name}"
    counter = 2
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            candidate = base / f"{stamp}-{name}-{counter}"
            counter += 1


def request_stop(run_dir: str | Path) -> Path:
    """Ask a running trainer to stop at its next step (every rank reads this file)."""
    path = Path(run_dir) / STOP_FILE
    path.write_text("stop requested\n", encoding="utf-8")
    return path


def is_run_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / CONFIG_FILE).is_file() or (p / EVENTS_FILE).is_file() or (p / REMOTE_FILE).is_file()


def list_run_dirs(runs_dir: str | Path) -> list[Path]:
    """Run folders under `runs_dir`, oldest first (hidden ones, such as an import in progress, left out)."""
    base = Path(runs_dir)
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if not p.name.startswith(".") and p.is_dir() and is_run_dir(p))
