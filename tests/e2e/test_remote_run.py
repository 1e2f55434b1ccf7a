"""A run on a remote machine, end to end: the "machine" is a real sshd on 127.0.0.1 (tests/fixtures/sshd.py).

From the Export page the tiny model's run is sent (bundle, model, images), checked there (check.sh) and
started detached on the CPU; the Train page shows its loss as the steps arrive through the SSH tail;
every SSH connection is then cut (the server's session processes killed) and the tail reconnects
without losing or repeating a step; Stop writes the STOP file there; the run folder comes back and
opens on the Runs page, marked with its machine. No key, passphrase or token is in any file written
on either side.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.holds import hold_env, release
from fixtures.sshd import SshServer
from pytestqt.qtbot import QtBot

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.project.folder import create_project
from studio.core.remote.machines import RemoteMachine, save_machine
from studio.core.runs.events import RunFinished, Sample, read_events
from studio.core.runs.folders import EVENTS_FILE
from studio.gui.context import StudioContext
from studio.gui.export.page import ExportPage
from studio.gui.runner.remote_run import RemoteRun
from studio.gui.runs.page import RunsPage
from studio.gui.runs.table import STATUS_COLUMN
from studio.gui.training.page import TrainPage
from tests.gui.conftest import close_plots

# Sending and check.sh take a few seconds; the trainer's start there (interpreter, torch, accelerate) 5-15 s.
START_TIMEOUT_MS = 240_000
FAKE_TOKEN = "hf_NotARealTokenButShapedLikeOne0042"
# The trainer there waits after these steps (its test hook): the connections are cut while it is held
# at the first, it goes on to the second while the tail reconnects, and Stop lands at the second.
CUT_AT, STOP_AT = 3, 8


@pytest.fixture
def gui_context(qtbot: QtBot, tmp_path: Path) -> Iterator[StudioContext]:
    from PySide6.QtCore import QSettings

    context = StudioContext(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    yield context
    context.run_controller.shutdown()  # a failed test leaves no run behind, here or there


def _config(tiny_sd15: Path, demo_data: Path) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family="sd15", base=str(tiny_sd15)),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=20, learning_rate=1e-3, seed=1),
        sampling=SamplingSection(every_n_steps=5, prompts=["a red circle"], steps=2, guidance=1.0),
        output=OutputSection(name="remote"),
    )


def _plotted(train: TrainPage) -> int:
    steps = train.plots.loss.raw.getData()[0]
    return 0 if steps is None else len(steps)


@pytest.mark.slow
def test_a_remote_run_is_watched_live_through_a_cut_connection_stopped_and_brought_back(
    qtbot: QtBot, gui_context: StudioContext, tiny_sd15: Path, demo_data: Path, tmp_path: Path,
    remote_machine: RemoteMachine, sshd: SshServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)  # a token in the person's environment travels nowhere
    remote_machine.env.update(hold_env(CUT_AT, STOP_AT))
    save_machine(remote_machine)
    context, controller = gui_context, gui_context.run_controller
    context.set_project(create_project(tmp_path / "project", _config(tiny_sd15, demo_data)))
    export, train, runs = ExportPage(context), TrainPage(context, controller), RunsPage(context, controller)
    qtbot.addWidget(export)
    qtbot.addWidget(train, before_close_func=close_plots)
    qtbot.addWidget(runs, before_close_func=close_plots)

    panel = export.remote
    panel.refresh_machines()
    panel.machines.setCurrentText("box")
    panel.cpu.setChecked(True)
    assert panel.run_check.isChecked() and panel.start_button.isEnabled()
    panel.start_button.click()
    qtbot.waitUntil(lambda: controller.running or not panel.worker.busy, timeout=START_TIMEOUT_MS)
    assert controller.running, panel.status.text()
    remote = controller.source
    assert isinstance(remote, RemoteRun) and panel.started is not None
    assert "Dataset" in panel.started.check_output and "All checks passed" in panel.started.check_output
    local, there = remote.run_dir, Path(remote.record.remote_run_dir)
    assert not train.train_button.isEnabled() and train.stop_button.isEnabled()

    # Live: the loss arrives while the run goes on there.
    qtbot.waitUntil(lambda: _plotted(train) >= CUT_AT, timeout=START_TIMEOUT_MS)
    assert not controller.model.ended
    console = train.console.text.toPlainText
    qtbot.waitUntil(lambda: "no GPU on the remote: nvidia-smi is not installed on box" in console(), timeout=30_000)

    # Every connection to the machine drops; the run goes on and the tail picks up where it was.
    assert sshd.kill_sessions() >= 1
    release(there, CUT_AT)
    qtbot.waitUntil(lambda: remote.mirrors[EVENTS_FILE].reconnects >= 1 and controller.model.step >= STOP_AT,
                    timeout=120_000)
    assert "reconnected; resuming at byte" in console()

    train.stop_button.click()
    qtbot.waitUntil(lambda: not controller.running, timeout=120_000)
    model = controller.model
    assert model.status == "stopped", console()[-3000:]
    steps = train.plots.loss.raw.getData()[0].tolist()
    assert steps == list(range(1, STOP_AT + 1)) and model.step == STOP_AT  # none lost, none twice
    assert (local / EVENTS_FILE).read_bytes() == (there / EVENTS_FILE).read_bytes()
    events = read_events(local / EVENTS_FILE)
    assert [e.status for e in events if isinstance(e, RunFinished)] == ["stopped"]
    samples = [Path(image).name for e in events if isinstance(e, Sample) for image in e.images]
    assert samples and all((local / "samples" / name).is_file() for name in samples)
    # Brought back: the run folder without its checkpoints (they stay there, they are large).
    assert (local / "config.toml").is_file() and (local / "console.log").stat().st_size > 0
    assert (there / "checkpoints").is_dir() and not (local / "checkpoints").exists()

    runs.refresh()
    (row,) = [r for r, s in enumerate(runs.table.summaries) if s.path == local]
    assert runs.table.item(row, STATUS_COLUMN).text() == "stopped (on box)"
    runs.table.select_paths([local.name])
    assert runs.buttons["pull"].isEnabled() and not runs.buttons["resume"].isEnabled()
    assert runs.open_run(local)
    qtbot.waitUntil(lambda: runs.opened is not None and runs.opened.run_dir == local, timeout=30_000)
    assert runs.opened is not None and runs.opened.step == model.step

    key_body = "".join(sshd.key.read_text().splitlines()[1:-1])
    secrets = [key_body[:40].encode(), key_body[-40:].encode(), FAKE_TOKEN.encode(), sshd.LOCKED_PASSPHRASE.encode()]
    written = [p for root in (tmp_path, Path(remote.record.bundle_dir), sshd.workspace / "models",
                              *(Path(os.environ[n]) for n in ("STUDIO_CONFIG_DIR", "STUDIO_CACHE_DIR")))
               for p in root.rglob("*") if p.is_file()]
    assert len(written) > 100
    assert [str(p) for p in written if any(s in p.read_bytes() for s in secrets)] == []
