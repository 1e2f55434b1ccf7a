"""Run one install step's command: its output goes to the install log and to the progress
callback line by line; a cancel request ends it (and what it started) within a moment."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from studio.core.console_window import no_window
from studio.core.studio_command import studio_command
from studio.core.trainenv.progress import InstallProgress, OutputReader

GUARD_MODULE = "studio.core.trainenv.guard"

CANCEL_POLL_S = 0.1


class Cancelled(Exception):
    """The person cancelled the install; what finished is kept and the next install continues."""

    def __init__(self, step: str) -> None:
        super().__init__(f"the install was cancelled during the {step} step; install again to continue")
        self.step = step


class StepFailed(Exception):
    """A step failed: what, and the log that has every line of it."""

    def __init__(self, step: str, message: str, log: Path, lines: list[str] | None = None) -> None:
        super().__init__(f"the {step} step failed: {message} (the whole output is in {log})")
        self.step, self.message, self.log = step, message, log
        self.lines = lines or []  # what the command printed, to explain the failure


def _die_with_parent() -> None:
    """In the child, before it runs: its own process group, ended with the studio if the studio is killed."""
    os.setsid()
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PR_SET_PDEATHSIG = 1
_PRCTL = _prctl()  # looked up before any fork: the child only calls it


def _popen_options() -> dict[str, Any]:
    """Each step runs in a process group of its own, so a cancel ends everything it started."""
    if os.name == "nt":  # and no console window of its own: the desktop app has no console to lend it
        return {"creationflags": no_window(getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))}
    return {"preexec_fn": _die_with_parent}


def guarded(command: list[str]) -> list[str]:
    """`command` under the guard that ends its process group with the studio (POSIX)."""
    if os.name == "nt":
        return command
    return studio_command([str(os.getpid()), "--", *command], module=GUARD_MODULE)


def _end_tree(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(psutil.Error):
        children = psutil.Process(process.pid).children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
    if os.name != "nt":
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGTERM)  # what the children started too
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        if os.name != "nt":
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
        process.kill()


def _watch(process: subprocess.Popen[str], cancel: Callable[[], bool], flag: list[bool]) -> None:
    while process.poll() is None:
        if cancel():
            flag.append(True)
            _end_tree(process)
            return
        time.sleep(CANCEL_POLL_S)


def run_logged(command: list[str], step: str, log: Path, reader: OutputReader,
               progress: Callable[[InstallProgress], None] | None, cancel: Callable[[], bool] | None,
               extra_env: dict[str, str] | None = None) -> list[str]:
    """Run `command`, appending its output to `log`; the output's lines, or Cancelled / StepFailed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PIP_NO_COLOR="1", NO_COLOR="1", **(extra_env or {}))
    lines: list[str] = []
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        try:
            process = subprocess.Popen(guarded(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       encoding="utf-8", errors="replace", env=env, bufsize=1, **_popen_options())
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
        raise StepFailed(step, last.strip(), log, lines)
    return lines
