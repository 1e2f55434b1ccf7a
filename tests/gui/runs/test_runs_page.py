"""The Runs page: the table from run folders, replay, overlay, resume, delete, import, queue."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import save_config
from studio.core.config.schema import TrainConfig
from studio.core.runs.events import EventWriter, RunFinished, RunStarted
from studio.gui.context import StudioContext
from studio.gui.runs.page import RunsPage
from studio.gui.runs.table import COLUMNS, STATUS_COLUMN
from tests.gui.conftest import close_plots, fake_command, make_project


def train_once(qtbot: QtBot, context: StudioContext, cfg: TrainConfig, *extra: str) -> Path:
    ctl = context.run_controller
    ctl.command_factory = fake_command(*extra)
    assert context.project is not None
    run_dir = ctl.start_config(resolve_paths(cfg, context.project.root))
    assert run_dir is not None
    qtbot.waitUntil(lambda: not ctl.running, timeout=15000)
    return run_dir


def two_runs_chosen(qtbot: QtBot, context: StudioContext, cfg: TrainConfig, tmp_path: Path) -> tuple[RunsPage, Path, Path]:
    """A project with two short runs, both chosen together on the Runs page: (page, first run, second run)."""
    from tests.gui.conftest import make_project

    context.set_project(make_project(tmp_path, cfg))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    first = train_once(qtbot, context, cfg, "--steps", "3", "--rate", "1000")
    second = train_once(qtbot, context, cfg, "--steps", "3", "--rate", "1000")
    page.refresh()
    page.table.select_paths([first.name, second.name])
    return page, first, second


def make_page(qtbot: QtBot, context: StudioContext) -> RunsPage:
    page = RunsPage(context, context.run_controller)
    page.confirm = lambda _title, _text: True
    qtbot.addWidget(page, before_close_func=close_plots)
    return page


def test_table_open_overlay_delete(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                   tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    first = train_once(qtbot, context, config, "--steps", "15", "--rate", "1000")
    second = train_once(qtbot, context, config, "--steps", "10000", "--rate", "1000", "--crash-at", "8")
    page.refresh()
    rows = {s.name: s for s in page.table.summaries}
    assert rows[first.name].status == "completed" and rows[first.name].steps == 15
    assert rows[second.name].status == "failed" and rows[second.name].resumable
    status_col = [page.table.item(r, STATUS_COLUMN).text() for r in range(page.table.rowCount())]
    assert sorted(status_col) == ["completed", "failed"]
    # The finished run's file, and which program it is for.
    output = next(page.table.item(r, COLUMNS.index("Output")) for r in range(page.table.rowCount())
                  if page.table.item(r, 0).text() == first.name)
    assert output.text() == "pytorch_lora_weights.safetensors"
    assert output.toolTip().endswith("pytorch_lora_weights.safetensors  (for diffusers (load_lora_weights))")

    # One click on a run shows it (its plots and how far it got).
    row = next(r for r in range(page.table.rowCount()) if page.table.item(r, 0).text() == first.name)
    cell = page.table.visualRect(page.table.model().index(row, 0)).center()
    qtbot.mouseClick(page.table.viewport(), Qt.MouseButton.LeftButton, pos=cell)
    qtbot.waitUntil(lambda: page.message.text().startswith("Showing"), timeout=10000)  # read on the page's reader
    assert len(page.plots.loss.smooth.getData()[1]) == 15
    assert page.message.text() == f"Showing {first.name}: step 15 of 15, finished."

    page.table.select_paths([first.name, second.name])
    page.buttons["overlay"].click()
    qtbot.waitUntil(lambda: page.message.text().startswith("Comparing"), timeout=10000)
    assert len(page.overlay.curves) == 2

    page.table.select_paths([first.name])
    page.buttons["delete"].click()
    assert not first.exists()
    assert [s.name for s in page.table.summaries] == [second.name]


def test_resume_runs_through_the_controller(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                            tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    run = train_once(qtbot, context, config, "--steps", "100", "--rate", "1000", "--crash-at", "5")
    commands: list[list[str]] = []

    def factory(plan: object) -> list[str]:
        commands.append(list(plan.command))  # type: ignore[attr-defined]
        return fake_command("--steps", "3", "--rate", "1000")(plan)  # type: ignore[arg-type]

    context.run_controller.command_factory = factory
    page.refresh()
    page.table.select_paths([run.name])
    assert page.buttons["resume"].isEnabled()
    assert page.resume_selected()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert commands[0][-2:] == ["--resume", str(run)]
    assert "studio.train.launcher" in commands[0]
    assert page.table.summaries[0].status == "completed"


def test_resume_launches_on_the_gpus_the_run_config_names_now(qtbot: QtBot, context: StudioContext,
                                                              config: TrainConfig, tmp_path: Path) -> None:
    """A person gives a stopped run a second GPU (launch.num_processes = 2 in its config.toml) and presses Resume:
    `accelerate launch` read the accelerate.yaml written at the first start and the run went on with one process,
    without a word."""
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    run = train_once(qtbot, context, config, "--steps", "100", "--rate", "1000", "--crash-at", "5")
    accelerate_yaml = run / "accelerate.yaml"
    first = accelerate_yaml.read_text(encoding="utf-8")
    assert "num_processes: 1\n" in first
    context.run_controller.command_factory = fake_command("--steps", "100", "--rate", "1000", "--crash-at", "5")
    page.refresh()
    page.table.select_paths([run.name])
    assert page.resume_selected()  # nothing edited: the file stays as it was
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert accelerate_yaml.read_text(encoding="utf-8") == first
    text = (run / "config.toml").read_text(encoding="utf-8")
    assert "num_processes = 1\n" in text and 'gpu_ids = "all"\n' in text
    (run / "config.toml").write_text(text.replace("num_processes = 1\n", "num_processes = 2\n")
                                     .replace('gpu_ids = "all"\n', 'gpu_ids = "0,1"\n'), encoding="utf-8")
    page.refresh()
    page.table.select_paths([run.name])
    assert page.resume_selected()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    launched = accelerate_yaml.read_text(encoding="utf-8")
    assert "num_processes: 2\n" in launched and "distributed_type: 'MULTI_GPU'\n" in launched
    assert "gpu_ids: '0,1'\n" in launched and "main_process_port: " in launched


def test_resume_says_the_project_settings_changed_since_are_not_the_runs(qtbot: QtBot, context: StudioContext,
                                                                         config: TrainConfig, tmp_path: Path) -> None:
    """A person lowers the learning rate on the Train page and resumes the stopped run: it went on at the rate of
    its own config.toml, and nothing said that the change was not its."""
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    run = train_once(qtbot, context, config, "--steps", "100", "--rate", "1000", "--crash-at", "5")
    context.run_controller.command_factory = fake_command("--steps", "100", "--rate", "1000", "--crash-at", "5")
    page.refresh()
    page.table.select_paths([run.name])
    assert page.resume_selected()
    assert page.message.text() == f"Resuming {run.name}; follow it on the Train page."  # nothing changed since
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert context.config is not None
    context.set_config(context.config.model_copy(update={"training": context.config.training.model_copy(
        update={"learning_rate": 5e-5})}))
    page.refresh()
    page.table.select_paths([run.name])
    assert page.resume_selected()
    said = page.message.text()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    assert said == (
        f"Resuming {run.name}; follow it on the Train page. {run.name} goes on with its own settings "
        f"({run / 'config.toml'}), not the project's: training.learning_rate = 0.0001 (the project: 5e-05). To train "
        "with the project's settings, press Train for a new run; to change this run's, edit that file and resume again.")


def test_open_deleted_run_says_so(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                  tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    assert not page.open_run(tmp_path / "runs" / "gone")
    assert "no longer exists" in page.message.text()


def test_import_zip_is_marked_remote(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                     tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path / "p", config))  # type: ignore[arg-type]
    run = train_once(qtbot, context, config, "--steps", "12", "--rate", "1000")
    archive = tmp_path / "pod.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in run.rglob("*"):
            z.write(f, "pod-run/" + f.relative_to(run).as_posix())
    page = make_page(qtbot, context)
    dest = page.import_path(archive)
    assert dest is not None and dest.name == "pod-run"
    row = next(r for r in range(page.table.rowCount()) if page.table.item(r, 0).text() == "pod-run")
    assert page.table.item(row, STATUS_COLUMN).text() == "completed (remote)"
    qtbot.waitUntil(lambda: page.message.text().startswith("Showing"), timeout=10000)
    assert len(page.plots.loss.smooth.getData()[1]) == 12


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_an_imported_folder_with_a_fifo_says_what_was_left_out(qtbot: QtBot, context: StudioContext,
                                                              config: TrainConfig, tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path / "p", config))  # type: ignore[arg-type]
    pod_copy = tmp_path / "from-pod" / "pod-run"
    writer = EventWriter(pod_copy / "events.jsonl")
    writer.write(RunStarted(config={}, world_size=1, total_steps=1, devices=["cpu"]))
    writer.write(RunFinished(status="completed", step=1))
    writer.close()
    os.mkfifo(pod_copy / "progress.pipe")
    page = make_page(qtbot, context)
    told: list[tuple[str, str]] = []
    page.inform = lambda title, text: told.append((title, text))
    dest = page.import_path(pod_copy)
    assert dest is not None and not (dest / "progress.pipe").exists()
    [(title, text)] = told
    assert title == "Run imported without some entries"
    assert f"pod-run was imported into {tmp_path / 'p' / 'runs'} without 1 entry" in text
    assert "left out 'progress.pipe': a named pipe (FIFO), not a file" in text


def test_queue_runs_configs_in_order_and_holds(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                               tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = fake_command("--steps", "5", "--rate", "1000")
    page = make_page(qtbot, context)
    paths = []
    for name in ("one", "two", "three"):
        cfg = config.model_copy(deep=True)
        cfg.output.name = name
        path = tmp_path / f"{name}.toml"
        save_config(cfg, path)
        paths.append(path)
        page.queue.add_config(path)
    page.queue.list.setCurrentRow(2)
    page.queue.move_selected(-1)  # three before two
    assert [i.name for i in page.controller.queue.items] == ["one.toml", "three.toml", "two.toml"]  # type: ignore[union-attr]
    # Rows name each config by its folder and file; the whole path is in the tooltip.
    assert page.queue.list.item(0).text() == f"{tmp_path.name}/one.toml — pending"
    # Ticked before the start, "stop after the current run" runs one item and holds the rest.
    page.queue.stop_after.click()
    page.queue.start_button.click()
    assert page.queue.stop_after.isChecked()
    qtbot.waitUntil(lambda: not page.controller.running, timeout=15000)
    qtbot.wait(200)
    states = [i.state for i in page.controller.queue.items]  # type: ignore[union-attr]
    assert states == ["completed", "pending", "pending"]  # held after the current run
    page.queue.stop_after.click()
    assert not page.controller.queue.stop_after_current  # type: ignore[union-attr]
    page.queue.start_button.click()
    qtbot.waitUntil(lambda: [i.state for i in page.controller.queue.items] == ["completed"] * 3,  # type: ignore[union-attr]
                    timeout=30000)
    run_names = sorted(p.name.split("-", 2)[-1] for p in (tmp_path / "runs").iterdir())
    assert run_names == ["one", "three", "two"]


def test_imported_run_folder_is_marked_remote_and_not_resumable(qtbot: QtBot, context: StudioContext,
                                                                 config: TrainConfig, tmp_path: Path) -> None:
    import shutil

    context.set_project(make_project(tmp_path / "p", config))  # type: ignore[arg-type]
    run = train_once(qtbot, context, config, "--steps", "100", "--rate", "1000", "--crash-at", "6")
    pod_copy = tmp_path / "from-pod" / "pod-run"
    shutil.copytree(run, pod_copy)  # what the person copied back from the rented machine
    page = make_page(qtbot, context)
    dest = page.import_path(pod_copy)
    assert dest is not None and (dest / "remote.json").is_file()
    rows = {page.table.item(r, 0).text(): page.table.item(r, STATUS_COLUMN).text() for r in range(page.table.rowCount())}
    assert rows == {run.name: "failed", "pod-run": "failed (remote)"}
    page.table.select_paths(["pod-run"])
    assert not page.buttons["resume"].isEnabled()
    assert "another machine" in page.buttons["resume"].toolTip()
    page.table.select_paths([run.name])  # the local one can be resumed
    assert page.buttons["resume"].isEnabled()


def test_a_queued_config_that_fails_its_preflight_is_skipped_with_the_reason(
    qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path
) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    context.run_controller.command_factory = fake_command("--steps", "5", "--rate", "1000")
    page = make_page(qtbot, context)
    broken = config.model_copy(deep=True)
    broken.dataset.concepts[0].path = "gone"
    broken.output.name = "broken"
    save_config(broken, tmp_path / "broken.toml")
    save_config(config, tmp_path / "good.toml")
    page.queue.add_config(tmp_path / "broken.toml")
    page.queue.add_config(tmp_path / "good.toml")
    page.queue.continue_on_error.click()  # without it the queue holds at the refused config, as at a failed run
    page.queue.start_button.click()
    queue = page.controller.queue
    assert queue is not None
    qtbot.waitUntil(lambda: [i.state for i in queue.items] == ["failed", "completed"], timeout=30000)
    assert queue.items[0].message.startswith(f"Image folder {tmp_path / 'gone'} does not exist.")
    assert [p.name.split("-", 2)[-1] for p in (tmp_path / "runs").iterdir()] == ["fake"]  # the broken one never started


def test_a_run_its_trainer_holds_is_running_however_long_it_is_silent(
    qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path
) -> None:
    import os
    import time

    from studio.core.runs.scheduling.lock import RunLock
    from tests.core.runs.conftest import step_event, write_events

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    runs = page.runs_dir()
    assert runs is not None
    run = runs / "20240101-000000-silent"
    write_events(run / "events.jsonl", [step_event(1), step_event(2)])
    (run / "config.toml").write_text('[model]\nfamily = "sd15"\n', encoding="utf-8")
    events = run / "events.jsonl"
    old = time.time() - 3600  # a trainer caching for an hour: no event meanwhile
    os.utime(events, (old, old))
    with RunLock(run):  # held by its trainer (started from a terminal, so no process file)
        page.refresh()
        page.table.select_paths([run.name])
        (row,) = page.table.summaries
        assert row.status == "running"
        assert not page.buttons["resume"].isEnabled() and not page.buttons["delete"].isEnabled()
        assert not page.controller.resume(run)
        assert "is being trained by" in page.message.text()
    page.refresh()
    page.table.select_paths([run.name])
    assert page.table.summaries[0].status == "interrupted" and page.buttons["resume"].isEnabled()


def test_the_runs_table_and_overlay_show_the_validation_loss(qtbot: QtBot, context: StudioContext,
                                                             config: TrainConfig, tmp_path: Path) -> None:
    from studio.gui.runs.table import COLUMNS

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    first = train_once(qtbot, context, config, "--steps", "20", "--rate", "1000", "--validation-every", "10")
    second = train_once(qtbot, context, config, "--steps", "30", "--rate", "1000", "--validation-every", "10")
    page.refresh()
    column = COLUMNS.index("Validation loss")
    assert sorted(page.table.item(row, column).text() for row in range(2)) == ["0.5700", "0.5800"]
    page.table.select_paths([first.name, second.name])
    page.buttons["overlay"].click()
    qtbot.waitUntil(lambda: page.message.text().startswith("Comparing"), timeout=10000)
    assert len(page.overlay.curves) == 4  # a training and a validation line for each run
    dashed = [c for c in page.overlay.curves if c.name().endswith("(validation)")]
    assert sorted(round(float(c.getData()[1][-1]), 3) for c in dashed) == [0.57, 0.58]


def test_another_project_shows_its_own_last_run_or_none(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                        tmp_path: Path) -> None:
    """A run trained in one project, then another project opened: Train and Runs say "no run" there,
    and the first project opened again shows its own last run on both."""
    from studio.gui.training.page import TrainPage

    first = make_project(tmp_path / "first", config)
    context.set_project(first)  # type: ignore[arg-type]
    train = TrainPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    runs = make_page(qtbot, context)
    run_dir = train_once(qtbot, context, config, "--steps", "15", "--rate", "1000")
    assert train.header.run_name.text() == run_dir.name

    context.set_project(make_project(tmp_path / "second", config))  # type: ignore[arg-type]
    for header in (train.header, runs.header):
        assert "no run" in header.status.text() and header.run_name.text() == "" and header.step.text() == "0"
    assert len(train.plots.loss.smooth.getData()[1] or []) == 0
    assert runs.table.rowCount() == 0

    context.set_project(first)  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: train.header.step.text() == "15 / 15" and runs.header.step.text() == "15 / 15",
                    timeout=10000)
    assert train.header.run_name.text() == run_dir.name and runs.header.run_name.text() == run_dir.name


def test_after_resume_the_header_counts_only_training_time_and_the_steps_since(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    """A run stopped an hour ago, resumed from the Runs page: Elapsed leaves the hour out, and the
    first step of the resumed leg (timed with the warm-up) gives no speed or ETA, nor a dip to 0."""
    import json
    import math
    import sys

    from studio.gui.training.page import TrainPage

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    train = TrainPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    page = make_page(qtbot, context)
    run = train_once(qtbot, context, config, "--steps", "100", "--rate", "1000", "--crash-at", "5")
    events = run / "events.jsonl"
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    for event in lines:
        event["time"] -= 3600.0  # stopped an hour ago
    events.write_text("".join(json.dumps(e) + "\n" for e in lines))
    leg = Path(__file__).resolve().parents[2] / "fixtures" / "resumed_leg.py"
    context.run_controller.command_factory = lambda plan: [sys.executable, str(leg), str(plan.run_dir), "10", "100"]
    page.refresh()
    page.table.select_paths([run.name])
    assert page.resume_selected()
    header = train.header
    qtbot.waitUntil(lambda: header.step.text() == "11 / 100", timeout=15000)
    assert header.speed.text() == "–" and header.eta.text() == "–"  # not 0.1 img/s and 5:24:26
    assert header.elapsed.text().startswith("0:0")  # seconds of training, not the hour it stood stopped
    assert math.isnan(context.run_controller.model.samples_per_s.view()[-1])
    (run / "GO").write_text("")
    qtbot.waitUntil(lambda: not context.run_controller.running, timeout=15000)
    assert header.speed.text() == "1.0 img/s" and header.elapsed.text().startswith("0:0")


def test_add_config_opens_in_the_project_folder(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Queue → Add config…: the file dialog opens in the project's folder, not wherever the studio was
    started from; the config chosen there joins the queue."""
    from PySide6.QtWidgets import QFileDialog

    monkeypatch.chdir(tmp_path.parent)
    project = make_project(tmp_path / "my project", config)
    context.set_project(project)  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    page.queue.add_button.click()
    dialog = page.queue.findChild(QFileDialog, "queue_add_dialog")
    assert dialog is not None and dialog.isVisible()
    assert Path(dialog.directory().absolutePath()) == project.root  # type: ignore[attr-defined]
    dialog.selectFile(str(project.config_path))  # type: ignore[attr-defined]
    dialog.accept()
    assert [Path(item.config) for item in context.run_controller.queue.items] == [project.config_path]  # type: ignore[union-attr]


def test_stop_on_a_run_training_on_a_cloud_cluster_stops_it_there(qtbot: QtBot, context: StudioContext,
                                                                   config: TrainConfig, tmp_path: Path) -> None:
    """A run on a cloud cluster that no window of this studio follows (closed with "keep running"): Stop said it
    was no longer running (it looked for a trainer on this machine); it writes the STOP file on the cluster."""
    from fixtures.fake_cloud import FakeCloud

    from studio.core.cloud import launcher
    from studio.core.cloud.run import CloudRunRecord, write_cloud_record
    from studio.core.runs.events import Step

    cloud = FakeCloud(tmp_path / "clusters", live=False)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "sky.yaml").write_text("name: demo\n")
    cloud.launch(bundle / "sky.yaml", "studio-abc")
    launcher.set_cloud_api(lambda: cloud)
    try:
        project = make_project(tmp_path / "project", config)
        context.set_project(project)  # type: ignore[arg-type]
        run = project.runs_dir / "20261207-093000-cloudy"
        writer = EventWriter(run / "events.jsonl")
        writer.write(Step(step=1, epoch=0, loss=0.5, lr=1e-4, samples_per_s=2.0))
        writer.close()
        write_cloud_record(run, CloudRunRecord(cluster="studio-abc", job=7, bundle=str(bundle), launched=1.0))
        page = make_page(qtbot, context)
        page.refresh()
        page.table.select_paths([run.name])
        assert page.buttons["stop"].isEnabled()
        said: list[str] = []
        shown = page.say
        page.say = lambda text: (said.append(text), shown(text))  # type: ignore[method-assign]
        page.buttons["stop"].click()
        qtbot.waitUntil(lambda: any(text.startswith(("Asked", "Cannot")) for text in said), timeout=15_000)
    finally:
        launcher.set_cloud_api(None)
    (asked,) = [text for text in said if text.startswith(("Asked", "Cannot"))]  # the run's replay says its own
    assert asked == ("Asked 20261207-093000-cloudy on studio-abc to stop: it saves a checkpoint and ends; bring "
                        "it back with: `studio-train cloud pull studio-abc`")
    (there,) = (cloud.workdir("studio-abc") / "runs").iterdir()
    assert (there / "STOP").is_file()


def test_the_bundles_readme_names_the_import_button_as_the_page_shows_it(qtbot: QtBot, context: StudioContext) -> None:
    # It said "Open run folder or .zip", a button the Runs page does not have.
    readme = Path(__file__).resolve().parents[3] / "resources" / "bundle" / "README.md.in"
    page = RunsPage(context, context.run_controller)
    qtbot.addWidget(page, before_close_func=close_plots)
    said = readme.read_text(encoding="utf-8").split("**Runs** page (", 1)[1].split(")", 1)[0]
    assert said.startswith(f"**{page.buttons['import'].text()}**")


def test_a_run_opened_shows_its_samples_and_the_next_run_its_own(qtbot: QtBot, context: StudioContext,
                                                                config: TrainConfig, tmp_path: Path) -> None:
    """An older run, or one brought back from a rented machine, is judged by its samples: the Runs page shows
    them (the Train page shows only the run it follows), and a run without samples does not keep the one
    before's picture up."""
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    sampled = train_once(qtbot, context, config, "--steps", "10", "--rate", "1000", "--samples-every", "5")
    longer = train_once(qtbot, context, config, "--steps", "20", "--rate", "1000", "--samples-every", "5")
    plain = train_once(qtbot, context, config, "--steps", "10", "--rate", "1000")
    page = make_page(qtbot, context)
    page.show()
    qtbot.waitUntil(lambda: page.message.text().startswith("Showing"), timeout=10000)  # the newest, shown first
    page.table.select_paths([sampled.name])
    qtbot.waitUntil(lambda: page.message.text().startswith(f"Showing {sampled.name}"), timeout=10000)
    page.views.setCurrentWidget(page.samples)
    gallery = page.samples
    assert gallery.grid.count() == 4  # two prompts at steps 5 and 10
    assert [gallery.prompt.itemText(i) for i in range(gallery.prompt.count())] == ["a red circle", "a blue square"]
    assert gallery.step_label.text() == "step 10" and not gallery.preview.pixmap().isNull()
    assert gallery.current() is not None and gallery.current().path == sampled / "samples" / "step-000010-0.png"

    # Runs compared prompt by prompt: the prompt chosen stays chosen in the next run shown.
    gallery.prompt.setCurrentIndex(1)
    gallery.prompt.textActivated.emit("a blue square")  # what a person's choice in the list emits
    page.table.select_paths([longer.name])
    qtbot.waitUntil(lambda: page.message.text().startswith(f"Showing {longer.name}"), timeout=10000)
    assert gallery.prompt.currentText() == "a blue square" and gallery.step_label.text() == "step 20"
    assert gallery.current() is not None and gallery.current().path == longer / "samples" / "step-000020-1.png"

    page.table.select_paths([plain.name])
    qtbot.waitUntil(lambda: page.message.text().startswith(f"Showing {plain.name}"), timeout=10000)
    assert page.views.currentWidget() is gallery  # going through runs' samples, the tab stays
    assert gallery.grid.count() == 0 and gallery.preview.pixmap().isNull()
    assert gallery.preview.text() == "This run made no samples: it had no sample prompts."
    page.table.select_paths([sampled.name])
    qtbot.waitUntil(lambda: page.message.text().startswith(f"Showing {sampled.name}"), timeout=10000)
    assert gallery.prompt.currentText() == "a blue square" and gallery.grid.count() == 4


def test_compare_sweep_names_the_runs_it_cannot_select(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                       tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = make_page(qtbot, context)
    run = train_once(qtbot, context, config, "--steps", "3", "--rate", "1000")
    page.select_runs([run.name, "20260101-000000-fake-learning_rate-1"])  # the second deleted since
    assert [s.name for s in page.table.selected()] == [run.name]
    assert page.message.text() == (
        f"Not in {tmp_path / 'runs'} (deleted, moved or written to another output.dir): "
        "20260101-000000-fake-learning_rate-1. 1 run of the sweep selected: press Overlay loss to compare them.")
    page.select_runs(["20260101-000000-fake-learning_rate-1"])  # none there: the button did nothing, without a word
    assert page.message.text().startswith("Not in ") and not page.table.selected()
