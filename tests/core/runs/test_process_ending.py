"""Kill leaves nothing behind, even what the tree starts while it is being looked up: the run
launcher starting its trainer at that moment, a trainer starting a rank or a data worker.

Each test holds the race open where it happens: `find_tree` is wrapped so that the tree starts a
process right after it was looked up, and the test waits for that process (or for the root to be
held, which is how the studio closes the gap), so no test depends on timing."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from fixtures.waits import scaled_s

from studio.core.runs import ending

pytestmark = pytest.mark.skipif(os.name == "nt", reason="process groups and SIGSTOP are POSIX")

# A trainer that says it is up, waits for `go`, then starts a worker (in the trainer's process group,
# as ranks and data workers are) that records its pid and sleeps.
TRAINER = """\
import os, subprocess, sys, time
folder = sys.argv[1]
open(os.path.join(folder, "trainer.pid"), "w").write(str(os.getpid()))
while not os.path.exists(os.path.join(folder, "go")):
    time.sleep(0.01)
worker = subprocess.Popen([sys.executable, "-c", "import os, sys, time; "
                           "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)",
                           os.path.join(folder, "worker.pid")])
worker.wait()
"""

# A run launcher that is slow to start its trainer: it waits for `go` first.
SLOW_LAUNCHER = """\
import os, subprocess, sys, time
folder = sys.argv[1]
while not os.path.exists(os.path.join(folder, "go")):
    time.sleep(0.01)
trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
open(os.path.join(folder, "trainer.pid"), "w").write(str(trainer.pid))
trainer.wait()
"""


def _wait_for(condition: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + scaled_s(seconds)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _running(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _end(pids: list[int | None]) -> None:
    for pid in pids:
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


def test_a_worker_started_after_the_look_up_is_ended_with_its_group(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = subprocess.Popen([sys.executable, "-c", ending.SESSION_LAUNCHER, sys.executable, "-c", TRAINER, str(tmp_path)])
    trainer = worker = None
    try:
        _wait_for(lambda: _pid(tmp_path / "trainer.pid") is not None, "the trainer starting")
        trainer = _pid(tmp_path / "trainer.pid")
        looked_up: list[list[int]] = []

        def look_up_then_start_a_worker(root: psutil.Process | None, known=()) -> ending.ProcessTree:
            tree = real_find_tree(root, known)
            looked_up.append([p.pid for p in tree.procs])
            (tmp_path / "go").touch()  # the trainer starts its worker now, after the look-up
            _wait_for(lambda: _pid(tmp_path / "worker.pid") is not None, "the worker starting")
            return tree

        real_find_tree = ending.find_tree
        monkeypatch.setattr(ending, "find_tree", look_up_then_start_a_worker)
        tree = ending.end_tree(psutil.Process(launcher.pid))
        worker = _pid(tmp_path / "worker.pid")

        assert looked_up == [[trainer, launcher.pid]]  # the worker was not there to be found
        tree.kill_after(scaled_s(10))
        assert not _running(trainer)
        _wait_for(lambda: not _running(worker), "the worker to end", seconds=5)
        assert tree.groups == [trainer]  # the trainer's session, signalled whole: the worker was born into it
    finally:
        _end([trainer, worker])
        if launcher.poll() is None:
            launcher.kill()


def test_a_launcher_killed_while_it_starts_its_trainer_leaves_no_trainer(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = subprocess.Popen([sys.executable, "-c", SLOW_LAUNCHER, str(tmp_path)])
    started: list[int] = []
    try:
        root = psutil.Process(launcher.pid)
        _wait_for(lambda: root.status() in (psutil.STATUS_SLEEPING, psutil.STATUS_RUNNING), "the launcher")

        def look_up_while_the_launcher_starts(root: psutil.Process | None, known=()) -> ending.ProcessTree:
            tree = real_find_tree(root, known)
            (tmp_path / "go").touch()  # the launcher starts the trainer now, unless it is held

            def started_or_held() -> bool:
                started[:] = [p.pid for p in launcher_children()]
                return bool(started) or launcher_status() == psutil.STATUS_STOPPED

            _wait_for(started_or_held, "the launcher to start its trainer or to be held")
            return tree

        def launcher_children() -> list[psutil.Process]:
            with contextlib.suppress(psutil.Error):
                return root.children()
            return []

        def launcher_status() -> str:
            with contextlib.suppress(psutil.Error):
                return str(root.status())
            return psutil.STATUS_DEAD

        real_find_tree = ending.find_tree
        monkeypatch.setattr(ending, "find_tree", look_up_while_the_launcher_starts)
        tree = ending.end_tree(root)

        assert tree.kill_after(scaled_s(10)) == []  # the launcher ended (and was reaped here)
        assert started == [], "the launcher started its trainer after the look-up"
        assert not (tmp_path / "trainer.pid").exists()
    finally:
        _end([*started, _pid(tmp_path / "trainer.pid")])
        if launcher.poll() is None:
            launcher.kill()


def test_a_command_without_a_session_of_its_own_is_ended_alone(tmp_path: Path) -> None:
    """A command the studio starts without a session of its own (a captioner, a download) is in the
    studio's process group: the command is ended, never a group (which would end the studio)."""
    command = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        tree = ending.end_tree(psutil.Process(command.pid))
        assert tree.groups == [] and [p.pid for p in tree.procs] == [command.pid]
        assert command.wait(timeout=scaled_s(10)) != 0
    finally:
        if command.poll() is None:
            command.kill()


def test_the_gpu_scripts_kill_ends_a_worker_started_after_the_look_up(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU benchmarks end a run at its timeout with the studio's own Kill: a worker the trainer starts
    while the run is being looked up is ended too, and the call ends with nothing of the run left."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[3] / "benchmarks"))
    from process_tree import kill_tree

    launcher = subprocess.Popen([sys.executable, "-c", ending.SESSION_LAUNCHER, sys.executable, "-c", TRAINER, str(tmp_path)])
    trainer = worker = None
    try:
        _wait_for(lambda: _pid(tmp_path / "trainer.pid") is not None, "the trainer starting")
        trainer = _pid(tmp_path / "trainer.pid")

        def children_then_a_worker(self: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
            found = real_children(self, recursive)
            if self.pid == launcher.pid and not (tmp_path / "go").exists():
                (tmp_path / "go").touch()  # the trainer starts its worker now, after the look-up
                _wait_for(lambda: _pid(tmp_path / "worker.pid") is not None, "the worker starting")
            return found

        real_children = psutil.Process.children
        monkeypatch.setattr(psutil.Process, "children", children_then_a_worker)
        kill_tree(launcher.pid)
        worker = _pid(tmp_path / "worker.pid")
        assert worker is not None

        launcher.wait(timeout=scaled_s(10))  # ended and reaped (by the kill's own wait)
        assert not _running(trainer)
        _wait_for(lambda: not _running(worker), "the worker to end", seconds=5)
    finally:
        _end([trainer, worker])
        if launcher.poll() is None:
            launcher.kill()
