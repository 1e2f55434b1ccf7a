"""Runs whose trainer is still working: found from their run folder, followed, stopped or ended.

A run the studio started records its trainer in the run folder's process file; a run left
running when the studio closed ("keep running") is found again through it after a restart.
`live_trainer` is the one place that reads it, so what marks a live run can change in one spot.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from studio.core.runs.folders import PROCESS_FILE, list_run_dirs, request_stop

START_TIME_SLACK_S = 1.0  # a recycled pid belongs to a process started at another time


@dataclass(frozen=True)
class LiveRun:
    run_dir: Path
    pid: int
    started: float  # the trainer's start time (UNIX seconds)

    def describe(self) -> str:
        when = time.strftime("%H:%M", time.localtime(self.started)) if self.started else "?"
        return f"{self.run_dir.name} (process {self.pid}, started {when})"


def live_trainer(run_dir: str | Path) -> LiveRun | None:
    """The trainer still working in `run_dir`, from its process file; None when it has ended."""
    folder = Path(run_dir)
    try:
        info = json.loads((folder / PROCESS_FILE).read_text(encoding="utf-8"))
        pid, started = int(info["pid"]), float(info.get("create_time", 0.0))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    run = LiveRun(folder, pid, started)
    return run if is_alive(run) else None


def is_alive(run: LiveRun) -> bool:
    try:
        proc = psutil.Process(run.pid)
        if started_elsewhere(proc, run):
            return False
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def started_elsewhere(proc: psutil.Process, run: LiveRun) -> bool:
    """The pid was reused by another program (its start time differs from the trainer's), or may have been: the
    trainer's start time is unknown (0: it had ended before the studio could read it), so the pid is not its."""
    return not run.started or abs(proc.create_time() - run.started) > START_TIME_SLACK_S


def find_live_runs(runs_dir: str | Path) -> list[LiveRun]:
    """Every run under `runs_dir` whose trainer is still working, newest first."""
    found = (live_trainer(folder) for folder in list_run_dirs(runs_dir))
    return sorted((run for run in found if run is not None), key=lambda r: r.started, reverse=True)


def stop_live_run(run: LiveRun) -> None:
    """Ask the trainer to stop at its next step (it saves a checkpoint, as a Stop in the studio does)."""
    request_stop(run.run_dir)


def trainer_process(run: LiveRun) -> psutil.Process | None:
    """The trainer's process (None when it has ended, or its pid now belongs to another program)."""
    try:
        proc = psutil.Process(run.pid)
        return None if started_elsewhere(proc, run) else proc
    except psutil.Error:
        return None


def busy_message(others: list[LiveRun]) -> str:
    """Why a second run now would share the GPU, for the question asked before starting it."""
    names = "\n".join(f"• {run.describe()}" for run in others)
    return (f"{'A run is' if len(others) == 1 else 'Runs are'} still training on this machine:\n{names}\n\n"
            "A second run shares the GPU's memory and time: both slow down, and either may run out of "
            "memory. Start anyway?")
