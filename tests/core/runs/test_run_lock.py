"""The run folder's lock: one trainer at a time, a dead holder's lock is stale, and readers ask it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from studio.core.runs.folders import LOCK_FILE
from studio.core.runs.records.history import delete_run, summarize_run
from studio.core.runs.scheduling.lock import RunLock, RunLockedError, lock_holder, trainer_alive
from tests.core.runs.conftest import step_event, write_events

ROOT = Path(__file__).resolve().parents[3]
HOLD = ("import sys, time; from studio.core.runs.scheduling.lock import RunLock\n"
        "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "20240101-000000-cat"
    write_events(run / "events.jsonl", [step_event(1)])
    (run / "config.toml").write_text('[model]\nfamily = "sd15"\n', encoding="utf-8")
    old = time.time() - 3600  # the last event is an hour old: a long caching phase, say
    os.utime(run / "events.jsonl", (old, old))
    return run


@pytest.fixture
def holder(run_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process (a trainer, as far as the folder can tell) holding the run's lock."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    proc.stdout.close()


def test_a_second_trainer_is_refused_while_the_first_holds_the_folder(run_dir: Path, holder: subprocess.Popen[str]) -> None:
    with pytest.raises(RunLockedError) as refused:
        RunLock(run_dir).acquire()
    assert f"process {holder.pid} on {socket.gethostname()}" in str(refused.value)
    assert refused.value.holder.pid == holder.pid
    found = lock_holder(run_dir)
    assert found is not None and found.pid == holder.pid and found.host == socket.gethostname()


def test_a_live_trainer_that_wrote_no_event_for_an_hour_is_running(run_dir: Path, holder: subprocess.Popen[str]) -> None:
    summary = summarize_run(run_dir)
    assert summary.status == "running" and not summary.resumable
    assert f"process {holder.pid}" in summary.message
    with pytest.raises(RuntimeError, match="being trained by"):
        delete_run(run_dir)
    assert run_dir.is_dir()


def test_the_lock_of_a_killed_trainer_is_stale_and_taken_over(run_dir: Path, holder: subprocess.Popen[str]) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (run_dir / LOCK_FILE).is_file()  # left behind, as kill -9 leaves it
    assert lock_holder(run_dir) is None and not trainer_alive(run_dir)
    assert summarize_run(run_dir).status == "interrupted"
    lock = RunLock(run_dir).acquire()
    try:
        assert lock.stale is not None and lock.stale.pid == holder.pid
        found = lock_holder(run_dir)
        assert found is not None and found.pid == os.getpid()
    finally:
        lock.release()
    assert not (run_dir / LOCK_FILE).exists()


def test_a_lock_written_on_another_machine_names_it(run_dir: Path) -> None:
    held = RunLock(run_dir).acquire()
    try:
        (run_dir / LOCK_FILE).write_text('{"pid": 7, "host": "pod-3", "started": 0}', encoding="utf-8")
        with pytest.raises(RunLockedError, match=r"process 7 on pod-3.*delete .*trainer\.lock"):
            RunLock(run_dir).acquire()
    finally:
        held.release()


def test_a_lock_taken_a_moment_ago_names_its_holder_not_an_unknown_machine(run_dir: Path) -> None:
    import json
    import threading

    fcntl = pytest.importorskip("fcntl")  # POSIX: the lock taken by hand as a trainer takes it
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # taken; its holder writes who it is a moment later

    def write_name() -> None:
        time.sleep(0.1)
        os.write(fd, json.dumps({"pid": 4242, "host": "box", "started": time.time()}).encode())

    writer = threading.Thread(target=write_name)
    writer.start()
    try:
        with pytest.raises(RunLockedError, match="process 4242 on box"):
            RunLock(run_dir).acquire()
    finally:
        writer.join()
        os.close(fd)


class _WindowsLocking:
    """msvcrt's locking as far as one process can tell: a byte locked at the file's position, taken."""

    LK_NBLCK, LK_UNLCK = 2, 0

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def locking(self, fd: int, mode: int, nbytes: int) -> None:
        self.calls.append((mode, os.lseek(fd, 0, os.SEEK_CUR)))


def test_a_trainer_on_windows_takes_the_lock_and_names_itself(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core import files
    from studio.core.runs.scheduling import lock as lock_module

    windows = _WindowsLocking()
    monkeypatch.delattr(os, "pwrite", raising=False)  # POSIX only
    monkeypatch.setattr(files, "fcntl", None)
    monkeypatch.setattr(files, "msvcrt", windows)
    monkeypatch.setattr(lock_module, "WINDOWS_LOCKS", True)
    held = RunLock(run_dir).acquire()
    try:
        text = (run_dir / LOCK_FILE).read_text(encoding="utf-8")
        assert f'"pid": {os.getpid()}' in text and text.startswith("{")  # at the start, not past the locked byte
        assert windows.calls == [(windows.LK_NBLCK, 1 << 20)]
    finally:
        held.release()
    assert not (run_dir / LOCK_FILE).exists()


def test_a_process_file_whose_trainer_ended_at_once_is_no_live_run_when_its_pid_comes_back(run_dir: Path) -> None:
    # The launcher ended before the studio could read its start time (a broken training environment): its
    # process file says 0. Days later another program has that pid (here: this test's process). The studio
    # must not follow that program as the run's trainer (nor end it with Kill, nor call the GPU busy).
    import json

    from studio.core.runs.folders import PROCESS_FILE
    from studio.core.runs.live import find_live_runs, live_trainer

    (run_dir / PROCESS_FILE).write_text(json.dumps({"pid": os.getpid(), "create_time": 0.0}), encoding="utf-8")
    assert not trainer_alive(run_dir)  # the Runs table already said so
    assert live_trainer(run_dir) is None
    assert find_live_runs(run_dir.parent) == []
