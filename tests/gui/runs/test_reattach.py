"""A training left running ("keep running") is found again when the window is rebuilt: the Train page
follows it with Stop and Kill, the Runs page stops it, and a second run on the same GPU asks first."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import psutil
import pytest
from fixtures.holds import hold_at, release
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import TrainConfig
from studio.core.runs.live import find_live_runs, live_trainer
from studio.gui.context import StudioContext
from studio.gui.runner.attached_run import AttachedRun
from studio.gui.runs.page import RunsPage
from studio.gui.training.page import TrainPage
from tests.gui.conftest import close_plots, fake_command, make_project


def _window(qtbot: QtBot, tmp_path: Path, project: object) -> tuple[StudioContext, TrainPage, RunsPage]:
    """What the main window builds: one context (with its run controller), the Train and Runs pages."""
    context = StudioContext(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    context.run_controller.command_factory = fake_command("--steps", "20", "--rate", "20")
    context.set_project(project)  # type: ignore[arg-type]
    train = TrainPage(context, context.run_controller)
    runs = RunsPage(context, context.run_controller)
    for page in (train, runs):
        qtbot.addWidget(page, before_close_func=close_plots)
    return context, train, runs


def test_a_detached_run_is_followed_again_and_stopped_from_the_runs_page(qtbot: QtBot, config: TrainConfig,
                                                                         tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 3, 8)  # detached while held at 3; followed again from 3 to 8, stopped there
    project = make_project(tmp_path, config)
    first, train, _runs = _window(qtbot, tmp_path, project)
    assert train.start_training()
    qtbot.waitUntil(lambda: first.run_controller.model.step >= 3, timeout=15000)
    run_dir = first.run_controller.run_dir
    assert run_dir is not None
    train.ask_close = lambda: "keep"
    assert train.can_close()
    train.shutdown()  # the window closes; the training goes on
    first.run_controller.shutdown(detach=True)
    live = live_trainer(run_dir)
    assert live is not None
    try:
        context, train, runs = _window(qtbot, tmp_path, project)  # the studio starts again
        ctl = context.run_controller
        assert ctl.running and ctl.run_dir == run_dir
        assert train.stop_button.isEnabled() and train.kill_button.isEnabled()
        assert not train.train_button.isEnabled()
        release(run_dir, 3)
        qtbot.waitUntil(lambda: ctl.model.step >= 8, timeout=15000)  # live plots again
        qtbot.waitUntil(lambda: "caching latents" in train.console.text.toPlainText(), timeout=5000)  # its console

        # A second run while it trains is refused by the one controller…
        assert ctl.start_config(resolve_paths(config, tmp_path)) is None
        with qtbot.waitSignal(ctl.sig_message, timeout=5000) as said:
            ctl.start_queue()  # …and Start queue says why it starts nothing (it said nothing)
        assert said.args == ["A run is training: start the queue when it has ended."]
        runs.refresh()
        runs.table.select_paths([run_dir.name])
        row = next(s for s in runs.table.summaries if s.path == run_dir)
        assert row.status == "running" and runs.buttons["stop"].isEnabled()
        runs.buttons["stop"].click()
        qtbot.waitUntil(lambda: not ctl.running, timeout=20000)
        assert ctl.model.status == "stopped" and ctl.model.step == 8
        assert train.train_button.isEnabled() and not train.stop_button.isEnabled()
        assert live_trainer(run_dir) is None
        runs.refresh()
        assert next(s for s in runs.table.summaries if s.path == run_dir).status == "stopped"
        context.run_controller.shutdown()
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(live.pid).kill()


def test_a_second_run_on_a_busy_gpu_asks_first(qtbot: QtBot, config: TrainConfig, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, 1)  # busy until the test ends it
    project = make_project(tmp_path, config)
    first, train, _runs = _window(qtbot, tmp_path, project)
    assert train.start_training()
    qtbot.waitUntil(lambda: first.run_controller.model.step >= 1, timeout=15000)
    run_dir = first.run_controller.run_dir
    first.run_controller.shutdown(detach=True)
    live = live_trainer(run_dir)  # type: ignore[arg-type]
    assert live is not None
    try:
        # Another window that does not follow it (as a second studio would): Train asks first.
        other = StudioContext(QSettings(str(tmp_path / "other.ini"), QSettings.Format.IniFormat))
        other.set_project(project)  # type: ignore[arg-type]
        found = other.run_controller.source
        assert isinstance(found, AttachedRun)
        other.run_controller.shutdown(detach=True)  # let go of the run it found, as a window that did not find it
        other.run_controller.command_factory = fake_command("--steps", "3", "--rate", "1000")
        page = TrainPage(other, other.run_controller)
        qtbot.addWidget(page, before_close_func=close_plots)
        asked: list[str] = []
        page.confirm = lambda title, text: asked.append(f"{title}: {text}") is None and False
        assert not page.start_training()
        assert asked and "The GPU is busy" in asked[0] and run_dir.name in asked[0]  # type: ignore[union-attr]
        assert [r.run_dir for r in find_live_runs(project.runs_dir)] == [run_dir]  # type: ignore[attr-defined]
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(live.pid).kill()


def test_a_queued_run_left_running_ends_its_queue_item_and_the_queue_goes_on(qtbot: QtBot, config: TrainConfig,
                                                                             tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from studio.core.config.files.toml_file import save_config
    from studio.core.runs.scheduling.queue import QUEUE_FILE

    hold_at(monkeypatch, 3)  # the first queued run is detached while held at 3
    project = make_project(tmp_path, config)
    first, _train, _runs = _window(qtbot, tmp_path, project)
    first.run_controller.command_factory = fake_command("--steps", "20", "--rate", "20", "--hold-lock")
    for name in ("a", "b"):
        path = tmp_path / f"{name}.toml"
        save_config(config.model_copy(update={"output": config.output.model_copy(update={"name": name})}), path)
        first.run_controller.queue.add(path)  # type: ignore[union-attr]
    first.run_controller.start_queue()
    qtbot.waitUntil(lambda: first.run_controller.model.step >= 3, timeout=15000)
    run_dir = first.run_controller.run_dir
    assert run_dir is not None
    first.run_controller.shutdown(detach=True)  # the window closes with "keep running"
    live = live_trainer(run_dir)
    assert live is not None
    try:
        context, _train, runs = _window(qtbot, tmp_path, project)  # the studio starts again and follows it
        ctl = context.run_controller
        assert ctl.running and ctl.run_dir == run_dir
        assert runs.queue.isEnabled() and runs.queue.list.count() == 2  # its queue is shown, not greyed out
        release(run_dir, 3)
        qtbot.waitUntil(lambda: not ctl.running, timeout=20000)
        assert ctl.model.status == "finished"
        saved = json.loads((tmp_path / QUEUE_FILE).read_text(encoding="utf-8"))["items"]
        assert [(i["state"], i["run_dir"]) for i in saved] == [("completed", str(run_dir)), ("pending", "")]
        ctl.start_queue()  # Start queue goes on with the next item
        assert ctl.running and ctl.run_dir is not None and ctl.run_dir.name.endswith("-b")
        release(ctl.run_dir, 3)
        qtbot.waitUntil(lambda: not ctl.running, timeout=20000)
        ctl.shutdown()
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(live.pid).kill()


def test_a_run_followed_again_mid_line_loses_no_event(qtbot: QtBot, tmp_path: Path) -> None:
    # The studio comes back while the trainer is writing a line: that event arrives whole with the next poll.
    import os

    from studio.core.runs.events import EventWriter, RunStarted, Sample
    from studio.core.runs.live import LiveRun
    from studio.core.runs.records.run_model import EventTail, RunModel

    events = tmp_path / "events.jsonl"
    with EventWriter(events, flush_interval=0.0) as writer:
        writer.write(RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"]))
    line = (Sample(step=5, images=["samples/a.png"], prompts=["a cat"]).to_json() + "\n").encode()
    with open(events, "ab") as handle:
        handle.write(line[:40])
    run = AttachedRun(LiveRun(tmp_path, os.getpid(), 0.0))
    model, tail = RunModel(tmp_path), EventTail(events)
    run.catch_up(model, tail)
    with open(events, "ab") as handle:
        handle.write(line[40:])
    model.apply_all(tail.poll_items())
    assert [s.step for s in model.samples] == [5] and tail.garbage_lines == 0
    run.deleteLater()


# A virtual environment's python.exe on Windows: it runs the base interpreter as a child (same arguments) in a job
# that ends that child when it ends; what the child starts breaks away from the job and lives on.
_VENV_REDIRECTOR = """\
import ctypes, signal, subprocess, sys
def ended_with_me():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the job's kill on close
sys.exit(subprocess.Popen([sys.executable, *sys.argv[1:]], preexec_fn=ended_with_me).wait())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the job is imitated with Linux's parent-death signal")
def test_a_run_kept_running_from_a_windows_virtual_environment_is_found_again(
        qtbot: QtBot, config: TrainConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the training environment's python.exe the launcher ran in the interpreter it hands over to, which ends
    with it: "keep running" recorded that process as the trainer, and the studio started again found the run ended
    while it trained on (not followed, its Stop said it no longer ran)."""
    hold_at(monkeypatch, 3)
    python = tmp_path / "venv" / "Scripts" / "python.exe"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!{sys.executable}\n{_VENV_REDIRECTOR}", encoding="utf-8")
    python.chmod(0o755)
    project = make_project(tmp_path, config)
    first, train, _runs = _window(qtbot, tmp_path, project)
    fake = fake_command("--steps", "20", "--rate", "20")
    first.run_controller.command_factory = lambda plan: [str(python), *fake(plan)[1:]]
    assert train.start_training()
    qtbot.waitUntil(lambda: first.run_controller.model.step >= 3, timeout=15000)
    run_dir = first.run_controller.run_dir
    assert run_dir is not None
    launcher = psutil.Process(first.run_controller.source.pid()).children()[0]  # type: ignore[union-attr]
    started = launcher.children()[0]  # the trainer's python.exe, and the interpreter it runs
    trainer = [started, *started.children(recursive=True)]
    first.run_controller.shutdown(detach=True)  # the window closes with "keep running"
    psutil.wait_procs([launcher], timeout=5)  # gone with the python.exe the studio started
    try:
        assert all(p.is_running() for p in trainer)  # the training goes on
        live = live_trainer(run_dir)
        assert live is not None and live.pid == started.pid
        context, train, _runs = _window(qtbot, tmp_path, project)  # the studio starts again and follows it
        ctl = context.run_controller
        assert ctl.running and ctl.run_dir == run_dir
        ctl.stop()
        release(run_dir, 3)
        qtbot.waitUntil(lambda: not ctl.running, timeout=20000)
        assert ctl.model.status == "stopped"
    finally:
        for proc in trainer:
            with contextlib.suppress(psutil.Error):
                proc.kill()
