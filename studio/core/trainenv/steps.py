"""Run one install step's command: its output goes to the install log and to the progress
callback line by line; a cancel request ends it (and what it started) within a moment."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from studio.core.trainenv.progress import InstallProgress, OutputReader

CANCEL_POLL_S = 0.1


class Cancelled(Exception):
    """The person cancelled the install; what finished is kept and the next install continues."""

    def __init__(self, step: str) -> None:
        super().__init__(f"the install was cancelled during the {step} step; install again to continue")
        self.step = step


class StepFailed(Exception):
    """A step failed: what, and the log that has every line of it."""

    def __init__(self, step: str, message: str, log: Path) -> None:
        super().__init__(f"the {step} step failed: {message} (the whole output is in {log})")
        self.step, self.message, self.log = step, message, log


def _end_tree(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(psutil.Error):
        children = psutil.Process(process.pid).children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()


def _watch(process: subprocess.Popen[str], cancel: Callable[[], bool], flag: list[bool]) -> None:
    while process.poll() is None:
        if cancel():
            flag.append(True)
            _end_tree(process)
            return
        time.sleep(CANCEL_POLL_S)


def run_logged(command: list[str], step: str, log: Path, reader: OutputReader,
               progress: Callable[[InstallProgress], None] | None, cancel: Callable[[], bool] | None) -> list[str]:
    """Run `command`, appending its output to `log`; the output's lines, or Cancelled / StepFailed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PIP_NO_COLOR="1", NO_COLOR="1")
    lines: list[str] = []
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        try:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       encoding="utf-8", errors="replace", env=env, bufsize=1)
        except OSError as exc:
            raise StepFailed(step, f"{command[0]} could not start: {exc}", log) from None
        cancelled: list[bool] = []
        with process:
            watcher = threading.Thread(target=_watch, args=(process, cancel, cancelled), daemon=True) if cancel else None
            if watcher:
                watcher.start()
            assert process.stdout is not None
            for line in process.stdout:
                out.write(line)
                lines.append(line.rstrip("\r\n"))
                state = reader.feed(line)
                if progress:
                    progress(state)
            code = process.wait()
            if watcher:
                watcher.join()
    if cancelled:
        raise Cancelled(step)
    if code != 0:
        last = next((line for line in reversed(lines) if line.strip()), f"exit code {code}")
        raise StepFailed(step, last.strip(), log)
    return lines
