"""A remote run outlives the studio: closing with "keep running" stops only the following, and after a
restart the Runs page lists it as running on its machine and Open follows it again, resuming the events
where the studio left them. The machine is a real sshd on 127.0.0.1; the run there is the fake trainer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.holds import hold_env, release
from fixtures.sshd import SshServer, fake_bundle
from pytestqt.qtbot import QtBot

from studio.core.config.schema import TrainConfig
from studio.core.remote.control import read_record, write_record
from studio.core.remote.machines import RemoteMachine, save_machine
from studio.core.remote.probe import probe_machine
from studio.core.remote.ssh import SshClient
from studio.core.remote.start import launch_detached
from studio.core.runs.events import RunFinished, Step, read_events
from studio.core.runs.folders import EVENTS_FILE
from studio.gui.context import StudioContext
from studio.gui.runner.remote_run import RemoteRun
from studio.gui.runs.page import RunsPage
from studio.gui.runs.table import STATUS_COLUMN
from studio.gui.training.page import TrainPage
from tests.gui.conftest import close_plots, make_project


@pytest.fixture
def contexts(qtbot: QtBot, tmp_path: Path) -> Iterator[list[StudioContext]]:
    """Studio sessions made by the test, each shut down at the end (a failed test leaves no run there)."""
    made: list[StudioContext] = []
    yield made
    for context in made:
        context.run_controller.shutdown()


def _session(qtbot: QtBot, contexts: list[StudioContext], project: object, tmp_path: Path) -> tuple[
        StudioContext, TrainPage, RunsPage]:
    from PySide6.QtCore import QSettings

    context = StudioContext(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    contexts.append(context)
    context.set_project(project)  # type: ignore[arg-type]
    train, runs = TrainPage(context, context.run_controller), RunsPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    qtbot.addWidget(runs, before_close_func=close_plots)
    return context, train, runs


def _steps(run: Path) -> list[int]:
    return [e.step for e in read_events(run / EVENTS_FILE) if isinstance(e, Step)]


def test_a_remote_run_is_followed_again_after_the_studio_restarts(
    qtbot: QtBot, contexts: list[StudioContext], config: TrainConfig, tmp_path: Path,
    remote_machine: RemoteMachine, sshd: SshServer,
) -> None:
    remote_machine.env.update(hold_env(3))  # the run waits there at step 3 while the studio closes and opens
    save_machine(remote_machine)
    project = make_project(tmp_path / "project", config)
    client = SshClient(remote_machine)
    record, _check = launch_detached(client, probe_machine(client), str(fake_bundle(sshd.workspace / tmp_path.name,
                                                                                   rate=10)), 1, cpu=True)
    client.close()
    local = tmp_path / "project" / "runs" / Path(record.remote_run_dir).name
    local.mkdir(parents=True)
    write_record(local, record)

    first, train, runs = _session(qtbot, contexts, project, tmp_path)
    runs.refresh()
    (summary,) = runs.table.summaries
    assert summary.status == "running" and summary.machine == "box" and not summary.resumable
    assert runs.table.item(0, STATUS_COLUMN).text() == "running (on box)"
    runs.table.select_paths([local.name])
    runs.buttons["open"].click()  # a live remote run: Open follows it
    controller = first.run_controller
    assert controller.running and isinstance(controller.source, RemoteRun)
    assert not runs.buttons["pull"].isEnabled()  # its files arrive while it is followed
    qtbot.waitUntil(lambda: controller.model.step >= 3, timeout=60_000)

    controller.shutdown(detach=True)  # the window closes with "keep running"
    assert not controller.running and read_record(local).state == "running"
    left_at = len(_steps(local))
    assert left_at == 3

    second, train, runs = _session(qtbot, contexts, project, tmp_path)
    runs.refresh()
    assert runs.table.item(0, STATUS_COLUMN).text() == "running (on box)"
    assert runs.follow_remote(local)
    controller = second.run_controller
    release(Path(record.remote_run_dir), 3)
    qtbot.waitUntil(lambda: controller.model.step >= left_at + 5, timeout=60_000)
    train.stop_button.click()
    qtbot.waitUntil(lambda: not controller.running, timeout=60_000)
    assert controller.model.status == "stopped"
    steps = _steps(local)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > left_at  # resumed, nothing twice
    assert [e.status for e in read_events(local / EVENTS_FILE) if isinstance(e, RunFinished)] == ["stopped"]
    assert (local / "launch-env.txt").is_file()  # brought back at the end
    runs.refresh()
    assert runs.table.item(0, STATUS_COLUMN).text() == "stopped (on box)"
    assert read_record(local).state == "pulled"


def test_a_remote_run_whose_machine_restarted_ends_saying_so(
    qtbot: QtBot, contexts: list[StudioContext], config: TrainConfig, tmp_path: Path,
    remote_machine: RemoteMachine, sshd: SshServer,
) -> None:
    """The rented machine restarted while the studio was closed: the run is gone there, with no exit status,
    and its pid now names another program. Open follows it, it ends at once, comes back, and the Train
    page says what may have happened, not that the trainer "exited with code 137"."""
    import subprocess
    import sys

    from studio.core.remote.control import RemoteRunRecord
    from studio.core.remote.machines import STATE_DIR

    project = make_project(tmp_path / "project", config)
    bundle = sshd.workspace / f"restarted-{tmp_path.name}"
    there = bundle / "runs" / "20260101-000000-x"
    there.mkdir(parents=True)
    (there / EVENTS_FILE).write_text('{"v": 1, "type": "step", "time": 1.0, "step": 1, "epoch": 0, "loss": 0.5, '
                                     '"lr": 0.0001}\n')
    (bundle / STATE_DIR).mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        pid_file = bundle / STATE_DIR / "launch-x.pid"
        pid_file.write_text(f"{other.pid}\n")
        record = RemoteRunRecord("box", remote_machine.describe(), str(bundle), str(there), str(pid_file),
                                 str(bundle / STATE_DIR / "launch-x.status"), str(bundle / STATE_DIR / "launch-x.log"),
                                 "nohup", "sftp", other.pid, 0.0)
        local = tmp_path / "project" / "runs" / there.name
        local.mkdir(parents=True)
        write_record(local, record)
        context, _train, runs = _session(qtbot, contexts, project, tmp_path)
        assert runs.follow_remote(local)
        controller = context.run_controller
        qtbot.waitUntil(lambda: not controller.running, timeout=60_000)
    finally:
        other.kill()
        other.wait()
    assert controller.model.status == "failed"
    assert "ended without an exit status" in controller.model.message
    assert "box restarted" in controller.model.message and "code 137" not in controller.model.message
