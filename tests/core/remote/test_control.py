"""A run started detached on the "machine" (a local sshd): it outlives dropped connections, its events
arrive here without a lost or repeated step, Stop and Kill reach it, and it comes back.

The bundle here is a stand-in: its launch.sh starts tests/fixtures/fake_trainer.py (events at 20
steps a second, samples every 15 steps), so no torch is needed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from fixtures.holds import hold_env, release
from fixtures.sshd import SshServer, fake_bundle

from studio.core.remote.control import (
    RemoteRunRecord,
    follow_files,
    kill_remote_run,
    pull_run,
    read_record,
    remote_state,
    request_remote_stop,
    write_record,
)
from studio.core.remote.machines import STATE_DIR, RemoteMachine
from studio.core.remote.probe import probe_machine
from studio.core.remote.ssh import SshClient
from studio.core.remote.start import launch_detached
from studio.core.runs.events import RunFinished, Sample, Step, read_events
from studio.core.runs.folders import CONSOLE_FILE, EVENTS_FILE


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.05)


def _steps(path: Path) -> list[int]:
    return [e.step for e in read_events(path) if isinstance(e, Step)] if path.exists() else []


def _start(remote_machine: RemoteMachine, sshd: SshServer, mode: str, tmp_path: Path, *held: int) -> tuple[
        SshClient, RemoteRunRecord, Path]:
    """Start the fake bundle there; its trainer waits after each `held` step until released or stopped."""
    env = {**remote_machine.env, **hold_env(*held)}
    client = SshClient(dataclasses.replace(remote_machine, detach=mode, env=env))
    report = probe_machine(client)
    bundle = fake_bundle(sshd.workspace / f"fake-{mode}-{tmp_path.name}")
    record, _check = launch_detached(client, report, str(bundle), gpus=1, cpu=True)
    local = tmp_path / "runs" / Path(record.remote_run_dir).name
    local.mkdir(parents=True)
    write_record(local, record)
    return client, record, local


def test_a_detached_run_outlives_a_dropped_connection_and_stops_when_asked(
    remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path
) -> None:
    client, record, local = _start(remote_machine, sshd, "auto", tmp_path, 5, 25)  # tmux where installed, else nohup
    assert record.detach in ("tmux", "nohup") and record.pid > 0
    assert read_record(local) == record
    there = Path(record.remote_run_dir)
    assert (there / "launch-env.txt").read_text().strip() == "GPUS_PER_NODE=1 STUDIO_BUNDLE_CPU=1"
    mirrors = follow_files(client, record, local)
    for mirror in mirrors.values():
        mirror.start()
    try:
        _wait(lambda: len(_steps(local / EVENTS_FILE)) >= 5, "five steps arriving here")
        assert sshd.kill_sessions() >= 1  # every connection to the machine drops
        assert remote_state(client, record) == (True, None)  # ... and the run goes on there
        release(there, 5)
        _wait(lambda: mirrors[EVENTS_FILE].reconnects >= 1 and len(_steps(local / EVENTS_FILE)) >= 25,
              "the tail reconnecting and steps arriving again")
        request_remote_stop(client, record)
        assert mirrors[EVENTS_FILE].wait(60), "the events tail did not end with the run"
        assert mirrors[CONSOLE_FILE].wait(30)
    finally:
        for mirror in mirrors.values():
            mirror.close()
    assert (local / EVENTS_FILE).read_bytes() == (there / EVENTS_FILE).read_bytes()
    events = read_events(local / EVENTS_FILE)
    steps = _steps(local / EVENTS_FILE)
    assert steps == list(range(1, 26))  # stopped where it was held
    assert [e.status for e in events if isinstance(e, RunFinished)] == ["stopped"]
    # Each sample event was appended only once its images were here.
    images = [image for e in events if isinstance(e, Sample) for image in e.images]
    assert len(images) >= 2 and all((local / image).is_file() for image in images)  # one sample event or more
    assert "stopped on request" in (local / CONSOLE_FILE).read_text()
    _wait(lambda: not remote_state(client, record)[0], "launch.sh exiting", 30)
    assert remote_state(client, record) == (False, 0)
    report = pull_run(client, record, local, mirrored=(EVENTS_FILE, CONSOLE_FILE))
    assert "launch-env.txt" in report.copied and "STOP" not in report.copied
    assert read_record(local).state == "pulled" and read_record(local).exit_status == 0
    client.close()


def test_kill_ends_the_whole_process_tree_there(remote_machine: RemoteMachine, sshd: SshServer,
                                                tmp_path: Path) -> None:
    client, record, _local = _start(remote_machine, sshd, "nohup", tmp_path, 3)
    there = Path(record.remote_run_dir)
    _wait(lambda: len(_steps(there / EVENTS_FILE)) >= 3, "the fake trainer stepping")
    bundle = Path(record.bundle_dir)

    def workers() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if Path(proc.cwd()).is_relative_to(bundle):
                    found.append(proc)
            except (psutil.Error, OSError):
                pass
        return found

    assert len(workers()) >= 2  # launch.sh's shell, the trainer, tee
    assert kill_remote_run(client, record, grace_s=5) >= 2
    assert workers() == []
    assert remote_state(client, record)[0] is False
    assert kill_remote_run(client, record) == 0  # nothing left to end
    client.close()


_LATE_LAUNCHER = """\
trap 'sh -c "sleep 1.5; echo late > late.txt" &' TERM
echo ready > ready.txt
while :; do sleep 0.1; done
"""


@pytest.mark.parametrize("own_session", [True, False], ids=["setsid", "same-session"])
def test_kill_also_ends_what_the_launcher_starts_after_it_was_asked_to_stop(tmp_path: Path,
                                                                          own_session: bool) -> None:
    """launch.sh traps SIGTERM (to write STOP) and may start the trainer after the tree was read:
    the kill ends that late process too, so nothing writes into the run folder after it returns."""
    import subprocess
    import sys

    from studio.core.remote.control import _KILL, _job

    (tmp_path / "launch.sh").write_text(_LATE_LAUNCHER)
    launcher = subprocess.Popen(["sh", "./launch.sh"], cwd=tmp_path, start_new_session=own_session)
    try:
        _wait(lambda: (tmp_path / "ready.txt").exists(), "the launcher starting", 30)
        done = subprocess.run([sys.executable, "-c", _job(_KILL, {"pid": launcher.pid, "grace": 0.5})],
                              capture_output=True, text=True, timeout=60, check=True)
        assert launcher.wait(timeout=10) != 0
        time.sleep(2)  # the late writer sleeps 1.5 s, past the grace: had it survived, its file would be here
        assert not (tmp_path / "late.txt").exists(), done.stdout
        left = [p for p in psutil.process_iter() if _cwd(p) == tmp_path]
        assert left == []
        assert '"forced": ' in done.stdout and int(done.stdout.split('"ended": ')[1].split(",")[0]) >= 2
    finally:
        if launcher.poll() is None:
            launcher.kill()


def _cwd(proc: psutil.Process) -> Path | None:
    try:
        return Path(proc.cwd())
    except (psutil.Error, OSError):
        return None


def test_after_the_machine_rebooted_following_ends_even_when_another_program_has_the_runs_pid(
    remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path
) -> None:
    """A rented machine restarted: the run is gone, and its pid (small numbers come back first after a
    restart) now belongs to another program. Following the run must end (the studio then says it ended
    without a status and brings it back), not wait on the other program for ever."""
    import subprocess
    import sys

    there = sshd.workspace / f"rebooted-{tmp_path.name}" / "runs" / "20260101-000000-x"
    there.mkdir(parents=True)
    (there / EVENTS_FILE).write_text('{"v": 1, "type": "step", "time": 1.0, "step": 1, "loss": 0.5}\n')
    (there / CONSOLE_FILE).write_text("step 1\n")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # not a launch.sh
    try:
        state = there.parent.parent / STATE_DIR
        state.mkdir()
        (state / "launch-x.pid").write_text(f"{other.pid}\n")
        record = RemoteRunRecord("box", "127.0.0.1", str(there.parent.parent), str(there),
                                 str(state / "launch-x.pid"), str(state / "launch-x.status"),
                                 str(state / "launch-x.log"), "nohup", "sftp", other.pid, 0.0)
        client = SshClient(remote_machine)
        assert remote_state(client, record) == (False, None)
        local = tmp_path / "here"
        mirrors = follow_files(client, record, local)
        for mirror in mirrors.values():
            mirror.start()
        try:
            assert mirrors[EVENTS_FILE].wait(30), "following waited on another program's process"
            assert mirrors[CONSOLE_FILE].wait(30)
        finally:
            for mirror in mirrors.values():
                mirror.close()
        assert mirrors[EVENTS_FILE].ended and (local / EVENTS_FILE).read_bytes() == (there / EVENTS_FILE).read_bytes()
        # ... and a new run of the project may start there: no run of it is still going.
        assert probe_machine(client, there.parent.parent.name).active_runs == []
        launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "launch.sh"])
        try:
            (state / "launch-y.pid").write_text(f"{launcher.pid}\n")
            assert probe_machine(client, there.parent.parent.name).active_runs == [str(state / "launch-y.pid")]
        finally:
            launcher.kill()
            launcher.wait()
        client.close()
    finally:
        other.kill()
        other.wait()


_SLOW_LAUNCH = """#!/usr/bin/env bash
while [ ! -f "$PWD/go" ]; do sleep 0.05; done
RUN="$PWD/runs/20260101-000000-slow"
mkdir -p "$RUN"
echo "launch.sh: run folder $RUN"
while [ ! -f "$RUN/STOP" ]; do sleep 0.1; done
"""


def test_a_connection_dropped_while_the_run_starts_finds_the_run_it_started(
    remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path
) -> None:
    """The Wi-Fi drops while the studio waits for the run to start: the run goes on there (it is detached),
    so the studio asks again once connected and follows it, instead of saying nothing was started and
    leaving a run nobody can follow or stop from the studio (a rented GPU paid for nothing)."""
    import threading

    bundle = sshd.workspace / f"slow-{tmp_path.name}"
    bundle.mkdir()
    (bundle / "launch.sh").write_text(_SLOW_LAUNCH)
    (bundle / "launch.sh").chmod(0o755)
    client = SshClient(dataclasses.replace(remote_machine, detach="nohup"))
    report = probe_machine(client)
    dropped = threading.Event()

    def drop_once_started() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any((bundle / ".studio-remote").glob("*.pid")):  # the launcher is going, detached
                sshd.kill_sessions()
                dropped.set()
                (bundle / "go").touch()
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=drop_once_started)
    watcher.start()
    try:
        record, _check = launch_detached(client, report, str(bundle), gpus=1, cpu=True)
    finally:
        watcher.join()
    assert dropped.is_set()
    assert record.remote_run_dir == str(bundle / "runs" / "20260101-000000-slow") and record.pid > 0
    assert remote_state(client, record) == (True, None)
    request_remote_stop(client, record)
    _wait(lambda: not remote_state(client, record)[0], "the run ending when asked")
    client.close()
