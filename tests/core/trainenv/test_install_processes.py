"""An install step leaves no process behind: a cancel ends what the step started too (its own process
group), and on Linux a studio that is killed takes the step's processes with it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from studio.core.trainenv.progress import InstallProgress, OutputReader
from studio.core.trainenv.steps import Cancelled, run_logged

ROOT = Path(__file__).resolve().parents[3]
# A step that starts a helper of its own (as uv and pip start builds), says both pids and waits.
STEP = ("import subprocess, sys, time; helper = subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(120)']); print('PIDS', helper.pid, flush=True); time.sleep(120)")


def _gone(pid: int, deadline_s: float = 15.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(os.name == "nt", reason="process groups are POSIX here")
def test_a_cancel_ends_the_step_and_what_it_started(tmp_path: Path) -> None:
    helpers: list[int] = []

    def seen(state: InstallProgress) -> None:
        if state.line.startswith("PIDS "):
            helpers.append(int(state.line.split()[1]))

    with pytest.raises(Cancelled):
        run_logged([sys.executable, "-c", STEP], "packages", tmp_path / "install.log",
                   OutputReader(InstallProgress("packages", 3, 5)), seen, lambda: bool(helpers))
    assert helpers and _gone(helpers[0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_studio_leaves_no_install_running(tmp_path: Path) -> None:
    studio = ("import sys; from pathlib import Path; from studio.core.trainenv.progress import InstallProgress, "
              "OutputReader; from studio.core.trainenv.steps import run_logged; "
              f"run_logged([sys.executable, '-c', {STEP!r}], 'torch', Path({str(tmp_path / 'install.log')!r}), "
              "OutputReader(InstallProgress('torch', 2, 5)), lambda s: print(s.line, flush=True), None)")
    app = subprocess.Popen([sys.executable, "-c", studio], stdout=subprocess.PIPE, text=True,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert app.stdout is not None
    line = app.stdout.readline()  # waits for the step to print its helper's pid
    assert line.startswith("PIDS "), line
    helper = int(line.split()[1])
    step = [p.pid for p in psutil.Process(app.pid).children()]
    app.send_signal(signal.SIGKILL)
    app.wait(timeout=30)
    app.stdout.close()
    assert step and _gone(step[0])
    assert _gone(helper)


# The guard, with the cancel's SIGTERM landing the moment its step has started and before anything else
# runs: where a loaded machine delivered it (a cancelled pip went on installing in its own session).
TERM_AS_THE_STEP_STARTS = """
import os, signal, subprocess, sys
from studio.core.trainenv import guard
started = subprocess.Popen
def start_then_cancel(*args, **kwargs):
    step = started(*args, **kwargs)
    print('STEP', step.pid, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    return step
guard.subprocess.Popen = start_then_cancel
sys.exit(guard.main([str(os.getppid()), '--', sys.executable, '-c', 'import time; time.sleep(120)']))
"""


@pytest.mark.skipif(os.name == "nt", reason="the guard is POSIX's")
def test_a_cancel_that_lands_as_the_guard_starts_the_step_ends_the_step() -> None:
    guard = subprocess.Popen([sys.executable, "-c", TERM_AS_THE_STEP_STARTS], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert guard.stdout is not None
    line = guard.stdout.readline()
    assert line.startswith("STEP "), line
    step = int(line.split()[1])
    try:
        ended = guard.wait(timeout=60)
        assert _gone(step), f"the cancelled step is still running after its guard ended ({ended})"
        assert ended == 143
    finally:
        guard.stdout.close()
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(step).kill()
