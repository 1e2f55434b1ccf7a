"""The Train page's sample preview shows a sample whole, in its own shape, at any size of the page."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtGui import QPixmap
from pytestqt.qtbot import QtBot

from studio.core.runs.events import RunStarted, Sample
from studio.core.runs.records.run_model import RunModel
from studio.gui.widgets.samples_gallery import SamplesGallery


def test_a_portrait_sample_is_neither_cropped_nor_stretched(qtbot: QtBot, tmp_path: Path) -> None:
    Image.new("RGB", (768, 1024), (200, 30, 30)).save(tmp_path / "portrait.png")
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"]))
    model.apply(Sample(step=5, images=["portrait.png"], prompts=["a tall red thing"]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.resize(900, 500)
    gallery.show()
    gallery.refresh(model)
    preview = gallery.preview
    assert not preview.pixmap().isNull()
    for width, height in ((700, 200), (200, 700), (400, 400)):
        preview.resize(width, height)
        shown = preview.image_rect()
        assert abs(shown.width() / shown.height() - 0.75) < 0.01
        assert preview.rect().contains(shown)


def test_samples_of_the_demos_random_model_are_called_noise(qtbot: QtBot, tmp_path: Path) -> None:
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    for base, noted in (("models/tiny-sd15", True), ("/home/me/demo-project/models/tiny-sd15", True),
                        ("runwayml/stable-diffusion-v1-5", False)):
        model = RunModel(tmp_path)
        model.apply(RunStarted(config={"model": {"family": "sd15", "base": base}}, world_size=1, total_steps=10,
                               devices=["cpu"]))
        gallery.refresh(model)
        assert gallery.random_model_note.isVisibleTo(gallery) is noted, base
    assert "noise" in gallery.random_model_note.text()


def test_the_empty_gallery_says_when_the_first_samples_come(qtbot: QtBot, tmp_path: Path) -> None:
    """Prompts set and a sample every 20 steps: the gallery names step 20, not "add prompts"; a run
    resumed at step 25 names step 40; the end of a short run is when its only samples come."""
    from studio.core.config.schema import TrainConfig
    from studio.gui.context import StudioContext
    from studio.gui.shell.application import make_settings
    from studio.gui.training.page import TrainPage
    from tests.gui.conftest import make_project

    config = TrainConfig.model_validate({
        "model": {"family": "sd15", "base": "models/tiny-sd15"},
        "dataset": {"concepts": [{"path": "data/shapes"}]},
        "training": {"max_steps": 30},
        "sampling": {"prompts": ["a red square"], "every_n_steps": 20},
    })
    context = StudioContext(make_settings(tmp_path / "settings.ini"))
    page = TrainPage(context, context.run_controller)
    qtbot.addWidget(page)
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page.tabs.setCurrentWidget(page.samples)
    assert page.samples.preview.text() == "No samples yet: the first samples are made at step 20."
    assert not context.change_config({"sampling.prompts": []})
    assert "add prompts in the Sample settings tab" in page.samples.preview.text()

    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    model = RunModel(tmp_path)
    sampling = {"prompts": ["a red square"], "every_n_steps": 20}
    model.apply(RunStarted(config={"sampling": sampling}, world_size=1, total_steps=100, devices=["cpu"]))
    model.step = 25
    gallery.refresh(model)
    assert gallery.preview.text() == "No samples yet: the first samples are made at step 40."
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={"sampling": sampling}, world_size=1, total_steps=12, devices=["cpu"]))
    gallery.refresh(model)
    assert gallery.preview.text() == "No samples yet: the first samples are made at step 12."
    context.run_controller.shutdown()


def test_a_tiny_models_64_px_sample_fills_the_preview_and_its_big_view(qtbot: QtBot, tmp_path: Path) -> None:
    Image.new("RGB", (64, 64), (30, 200, 40)).save(tmp_path / "tiny.png")
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"]))
    model.apply(Sample(step=5, images=["tiny.png"], prompts=["a green square"]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.resize(900, 500)
    gallery.show()
    gallery.refresh(model)
    gallery.preview.resize(400, 300)
    assert gallery.preview.image_rect().size().toTuple() == (300, 300)  # not a 64 px dot in the middle
    gallery.enlarge(gallery.current())  # type: ignore[arg-type]
    dialog = gallery.last_dialog
    assert dialog is not None
    qtbot.waitExposed(dialog)
    shown = dialog.image.image_rect()
    assert shown.width() >= 500 and shown.width() == shown.height(), shown
    dialog.close()


def test_an_edit_runs_samples_show_the_control_image_they_edit_beside_them(qtbot: QtBot, tmp_path: Path) -> None:
    Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "step-000004-0.png")
    Image.new("RGB", (64, 64), (30, 30, 200)).save(tmp_path / "control-0.png")
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.show()
    model.apply(Sample(step=4, images=["step-000004-0.png"], prompts=["make it red"]))
    gallery.refresh(model)
    assert not gallery.control.isVisibleTo(gallery)  # a run of plain images: no "before"
    model.apply(Sample(step=8, images=["step-000004-0.png"], prompts=["make it red"], controls=["control-0.png"]))
    gallery.refresh(model)
    assert model.sample_controls == [tmp_path / "control-0.png"]
    assert gallery.control.isVisibleTo(gallery) and not gallery.control.pixmap().isNull()
    assert gallery.control.pixmap().toImage().pixelColor(32, 32).blue() == 200


def test_a_resume_from_an_older_checkpoint_shows_its_steps_samples_once(qtbot: QtBot, tmp_path: Path) -> None:
    # Samples at 10 and 20, killed, resumed from the checkpoint at 10: the sample of step 20 is made
    # again, into the same file. The gallery lists steps 10 and 20 once each, step 20 as made again,
    # even when the new one came before its redraw.
    Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "10.png")
    Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "20.png")
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=30, devices=["cpu"]))
    for step in (10, 20):
        model.apply(Sample(step=step, images=[f"{step}.png"], prompts=["a cat"]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.resize(900, 500)
    gallery.show()
    gallery.refresh(model)
    assert gallery.load_visible_thumbnails() == 2
    model.apply(RunStarted(config={}, world_size=1, total_steps=30, devices=["cpu"], resumed_from_step=10))
    Image.new("RGB", (64, 64), (30, 30, 200)).save(tmp_path / "20.png")
    os.utime(tmp_path / "20.png", (time.time() + 60, time.time() + 60))  # made minutes later, as a resume is
    model.apply(Sample(step=20, images=["20.png"], prompts=["a cat"]))
    gallery.refresh(model)
    gallery.load_visible_thumbnails()
    assert [gallery.grid.item(i).text().split("\n")[0] for i in range(gallery.grid.count())] == ["step 10", "step 20"]
    thumbnail = gallery.grid.item(1).icon().pixmap(16, 16).toImage().pixelColor(8, 8)
    assert (thumbnail.red(), thumbnail.blue()) == (30, 200)  # the resumed leg's picture, not the lost one's


def test_a_long_runs_gallery_reads_only_the_thumbnails_in_view(qtbot: QtBot, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # 600 samples (a long run's): opening it reads the few pictures in view, not all 600 on the GUI thread;
    # scrolled to the end, the pictures there are read then.
    from studio.gui.widgets import samples_gallery as samples

    Image.new("RGB", (256, 256), (200, 30, 30)).save(tmp_path / "s.png")
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=60_000, devices=["cpu"]))
    for step in range(100, 60_001, 100):
        model.apply(Sample(step=step, images=["s.png"], prompts=["a cat"]))
    read: list[str] = []
    real_pixmap = samples.QPixmap

    def counting_pixmap(*args: object) -> QPixmap:
        if args and isinstance(args[0], str):
            read.append(args[0])
        return real_pixmap(*args)

    monkeypatch.setattr(samples, "QPixmap", counting_pixmap)

    def shown(row: int) -> bool:  # the grid item shows the sample's picture
        colour = gallery.grid.item(row).icon().pixmap(16, 16).toImage().pixelColor(8, 8)
        return (colour.red(), colour.green(), colour.alpha()) == (200, 30, 255)

    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.resize(900, 700)
    gallery.refresh(model)  # read while the Samples tab is not shown: no thumbnail yet
    assert len(read) <= 3  # the preview's picture (the prompt and the slider each show it)
    gallery.show()
    qtbot.waitUntil(lambda: shown(0), timeout=5000)
    assert gallery.grid.count() == 600
    assert len(read) < 60  # the items in view and the preview
    gallery.grid.scrollToBottom()
    qtbot.waitUntil(lambda: shown(599), timeout=5000)
    assert len(read) < 120


def test_samples_a_resumed_leg_makes_again_are_listed_once(qtbot: QtBot, tmp_path: Path) -> None:
    """Killed after the samples of step 4, resumed from the checkpoint of step 2: step 4's samples are made again
    into the same files, and the step slider still goes 2, 4 (not 2, 4, 4)."""
    for name in ("step-000002-0.png", "step-000004-0.png"):
        Image.new("RGB", (64, 64), (30, 200, 40)).save(tmp_path / name)
    model = RunModel(tmp_path)
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    model.apply(RunStarted(config={}, world_size=1, total_steps=6, devices=["cpu"]))
    for step in (2, 4):
        model.apply(Sample(step=step, images=[f"step-{step:06d}-0.png"], prompts=["a green square"]))
    gallery.refresh(model)
    model.apply(RunStarted(config={}, world_size=1, total_steps=6, devices=["cpu"], resumed_from_step=2))
    model.apply(Sample(step=4, images=["step-000004-0.png"], prompts=["a green square"]))
    gallery.refresh(model)
    assert [s.step for s in gallery.steps_for("a green square")] == [2, 4]
    assert gallery.grid.count() == 2 and len(model.samples) == 2
    model.apply(Sample(step=6, images=["step-000004-0.png"], prompts=["a green square"]))
    gallery.refresh(model)
    assert [s.step for s in gallery.steps_for("a green square")] == [2, 4, 6]
    assert gallery.step_label.text() == "step 6"


def test_the_big_view_names_a_prompts_trigger_word(qtbot: QtBot, tmp_path: Path) -> None:
    """A prompt with "<sks>" or "<lora:style:0.8>": the words under the enlarged sample are the prompt as written."""
    from PySide6.QtGui import QTextDocument
    from PySide6.QtWidgets import QLabel

    Image.new("RGB", (64, 64), (30, 200, 40)).save(tmp_path / "step-000005-0.png")
    prompt = "a photo of <sks> dog, <lora:style:0.8> & friends"
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"]))
    model.apply(Sample(step=5, images=["step-000005-0.png"], prompts=[prompt]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.refresh(model)
    gallery.enlarge(gallery.current())  # type: ignore[arg-type]
    dialog = gallery.last_dialog
    assert dialog is not None
    shown = QTextDocument()
    shown.setHtml(dialog.findChildren(QLabel)[0].text())
    assert shown.toPlainText().splitlines()[0] == f"step 5 · {prompt}"
    dialog.close()


def test_a_train_page_built_after_the_newest_run_was_read_shows_it_and_keeps_its_width(
        qtbot: QtBot, tmp_path: Path) -> None:
    """The window opens the project, then builds its pages one by one (the Train page seconds later, behind a
    dataset being read): the run read meanwhile is shown, and a long sample prompt does not widen the page."""
    from studio.core.config.schema import TrainConfig
    from studio.core.runs.events import RunFinished
    from studio.gui.context import StudioContext
    from studio.gui.shell.application import make_settings
    from studio.gui.training.page import TrainPage
    from tests.core.runs.conftest import step_event, write_events
    from tests.gui.conftest import close_plots, make_project

    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "models/tiny-sd15"},
                                         "dataset": {"concepts": [{"path": "data/shapes"}]}})
    project = make_project(tmp_path, config)
    run = project.runs_dir / "20240101-000000-done"  # type: ignore[attr-defined]
    prompt = "masterpiece, best quality, " * 20
    write_events(run / "events.jsonl", [
        RunStarted(config={}, world_size=1, total_steps=2, devices=["cpu"], time=1000.0), step_event(1),
        Sample(step=1, images=["samples/step-000001-0.png"], prompts=[prompt], time=1001.5), step_event(2),
        RunFinished(status="completed", step=2, time=1003.0)])
    context = StudioContext(make_settings(tmp_path / "settings.ini"))
    context.set_project(project)  # type: ignore[arg-type]
    source = context.run_controller.source
    assert source is not None
    qtbot.waitUntil(lambda: source.loaded, timeout=10000)  # type: ignore[attr-defined]
    page = TrainPage(context, context.run_controller)
    qtbot.addWidget(page, before_close_func=close_plots)
    assert page.header.run_name.text() == run.name and page.header.step.text() == "2 / 2"
    assert page.samples.prompt.currentText() == prompt
    assert page.minimumSizeHint().width() < 1000
    context.run_controller.shutdown()


def test_a_train_page_built_after_the_project_opened_says_when_its_first_samples_come(
        qtbot: QtBot, tmp_path: Path) -> None:
    from studio.core.config.schema import TrainConfig
    from studio.gui.context import StudioContext
    from studio.gui.shell.application import make_settings
    from studio.gui.training.page import TrainPage
    from tests.gui.conftest import close_plots, make_project

    config = TrainConfig.model_validate({
        "model": {"family": "sd15", "base": "models/tiny-sd15"}, "dataset": {"concepts": [{"path": "data/shapes"}]},
        "training": {"max_steps": 30}, "sampling": {"prompts": ["a red square"], "every_n_steps": 20}})
    context = StudioContext(make_settings(tmp_path / "settings.ini"))
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    page = TrainPage(context, context.run_controller)  # the window builds it after the project opened
    qtbot.addWidget(page, before_close_func=close_plots)
    assert page.samples.preview.text() == "No samples yet: the first samples are made at step 20."
    context.run_controller.shutdown()


def test_a_cloud_runs_samples_show_once_it_is_brought_back(qtbot: QtBot, tmp_path: Path) -> None:
    """The events name the cluster's paths, under a run folder of another name than the one here (each is named
    by its own start): the samples brought back into this run folder are the ones shown."""
    local = tmp_path / "runs" / "20240101-000100-demo"
    there = "/home/sky/sky_workdir/runs/20240101-000500-demo"
    (local / "samples").mkdir(parents=True)
    Image.new("RGB", (64, 64), (200, 30, 30)).save(local / "samples" / "step-000010-0.png")
    model = RunModel(local)
    model.apply(RunStarted(config={}, world_size=1, total_steps=10, devices=["cuda:0"], run_dir=there))
    model.apply(Sample(step=10, images=[f"{there}/samples/step-000010-0.png"], prompts=["a red square"]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.refresh(model)
    assert not gallery.preview.pixmap().isNull()
    assert model.samples[0].path == local / "samples" / "step-000010-0.png"


def test_no_run_shown_leaves_no_picture_of_the_run_before(qtbot: QtBot, tmp_path: Path) -> None:
    """Another project opened (its Runs page shows no run yet): the last run's sample and step go with it."""
    Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "red.png")
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"]))
    model.apply(Sample(step=5, images=["red.png"], prompts=["a red thing"]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.refresh(model)
    assert not gallery.preview.pixmap().isNull() and gallery.step_label.text() == "step 5"
    gallery.refresh(RunModel())
    assert gallery.preview.pixmap().isNull() and gallery.step_label.text() == "–" and gallery.grid.count() == 0


def test_a_finished_run_without_samples_says_none_came_not_when_they_come(qtbot: QtBot, tmp_path: Path) -> None:
    from studio.core.runs.events import RunFinished, Step

    model = RunModel(tmp_path)
    model.apply(RunStarted(config={"sampling": {"prompts": ["a cat"], "every_n_steps": 100}}, world_size=1,
                           total_steps=300, devices=["cpu"]))
    model.apply(Step(step=40, epoch=0, loss=0.5, lr=1e-4))
    model.apply(RunFinished(status="stopped", step=40))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.refresh(model)
    assert gallery.preview.text() == ("This run made no samples: it ended at step 40, before its first samples "
                                      "(step 100).")
    model.apply(RunStarted(config={"sampling": {"prompts": ["a cat"], "every_n_steps": 10}}, world_size=1,
                           total_steps=300, devices=["cpu"], resumed_from_step=40))
    model.apply(Step(step=50, epoch=0, loss=0.5, lr=1e-4))
    model.apply(RunFinished(status="failed", step=50))
    gallery.refresh(model)
    assert gallery.preview.text() == "This run made no samples: each round failed; its errors and console.log say why."


def test_samples_missing_from_a_run_folder_are_said_missing(qtbot: QtBot, tmp_path: Path) -> None:
    """A run copied back without its samples folder: its grid names each picture missing instead of a blank
    square (and reading them raises no Qt warning)."""
    Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "there.png")
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"]))
    model.apply(Sample(step=5, images=["there.png", "samples/step-000005-1.png"], prompts=["a cat", "a dog"]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.resize(900, 500)
    gallery.show()
    gallery.refresh(model)
    assert gallery.load_visible_thumbnails() == 2
    there, missing = gallery.grid.item(0), gallery.grid.item(1)
    assert there.text() == "step 5\na cat" and not there.icon().isNull()
    assert missing.text() == "step 5\n(picture missing)" and "cannot be read" in missing.toolTip()
