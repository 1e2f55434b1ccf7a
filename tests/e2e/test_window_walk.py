"""The window's walk, end to end in the real MainWindow, as a new person goes through it:

their own kohya folder (`mydata/10_mycat`, one image without a caption) opened as a project → the missing
caption typed with the keyboard → a known captioner chosen in Caption with…, downloaded from a stand-in
hub on 127.0.0.1 and run on every image → a FLUX.2 [klein] 9B preset used (it brings its 9B base)
→ the SD1.5 preset and the tiny model on Model & Preset, loss masks from
a folder and TensorBoard turned on in its form → Train → Stop → Resume on the Train page → the run on the
Runs page → a bundle from Export.

Everything is done through the widgets a person uses (clicks, keys, the menu); the file dialogs and
Yes/No questions are answered by stand-ins. The trainer and the captioner are the real ones, each in its
own process; every wait is on what the person would see, with a deadline that follows the run's progress.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from fixtures.fake_hub import FakeHub
from fixtures.holds import hold_at
from fixtures.waits import files_progress, scaled_s, wait_while_progressing
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QCheckBox, QFileDialog, QLabel, QMessageBox, QPushButton, QSpinBox, QWidget
from pytestqt.qtbot import QtBot

from studio.core.config.files.toml_file import load_config
from studio.gui.context import StudioContext
from studio.gui.shell.application import make_settings
from studio.gui.shell.main_window import MainWindow
from studio.gui.training.page import TrainPage

LEFT = Qt.MouseButton.LeftButton
TAGGER_REPO = "SmilingWolf/wd-vit-tagger-v3"
STEPS = 20
HELD_AT = 2  # the trainer waits after this step until Stop lands (its test hook), on any machine
IDLE_S = 90  # a run that writes nothing for this long (scaled to the machine) is stuck
CAPTIONS = {"a.png": "mycat, red", "b.png": None, "c.png": "mycat, green", "d.png": "mycat, blue"}
COLOURS = {"a.png": (210, 30, 30), "b.png": (200, 200, 40), "c.png": (30, 200, 40), "d.png": (30, 40, 210)}
TYPED = "mycat, sleeping on a sofa"


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path) -> Iterator[MainWindow]:
    win = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(win)
    yield win
    win.context.run_controller.shutdown()  # a failed test leaves no trainer behind
    # qtbot closes the window next: each page's shutdown closes its plots (the Runs page's overlay too)


def _kohya_folder(root: Path) -> Path:
    folder = root / "mydata" / "10_mycat"
    folder.mkdir(parents=True)
    for name, caption in CAPTIONS.items():
        Image.new("RGB", (64, 64), COLOURS[name]).save(folder / name)
        if caption is not None:
            (folder / name).with_suffix(".txt").write_text(caption, encoding="utf-8")
    return folder


def _masks_folder(root: Path) -> Path:
    """A loss mask per image, named as it: the left half trains, the right half is ignored."""
    folder = root / "masks"
    folder.mkdir()
    for name in CAPTIONS:
        mask = Image.new("L", (64, 64), 0)
        mask.paste(255, (0, 0, 32, 64))
        mask.save(folder / name)
    return folder


def _action(window: MainWindow, text: str) -> QAction:
    return next(a for a in window.findChildren(QAction) if a.text() == text)


def _click(qtbot: QtBot, button: QWidget) -> None:
    assert button.isEnabled(), f"{button.objectName() or button} is disabled"
    qtbot.mouseClick(button, LEFT)


def _type_into(qtbot: QtBot, field: QWidget, text: str) -> None:
    """Click into a field, select what is there, type `text` and press Enter (as a person edits a value)."""
    qtbot.mouseClick(field, LEFT)
    qtbot.keyClick(field, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(field, text)
    qtbot.keyClick(field, Qt.Key.Key_Return)


def _caption(folder: Path, name: str) -> str | None:
    path = (folder / name).with_suffix(".txt")
    return path.read_text(encoding="utf-8") if path.exists() else None


def _wait_run(qtbot: QtBot, train: TrainPage, condition: Callable[[], bool], what: str) -> None:
    def run_file(name: str) -> Callable[[], Path | None]:
        return lambda: train.controller.model.run_dir / name if train.controller.model.run_dir else None

    wait_while_progressing(qtbot, condition, files_progress(run_file("events.jsonl"), run_file("console.log")),
                           idle_s=IDLE_S, what=what)


def _shown_step(train: TrainPage) -> int:
    match = re.match(r"(\d+) / ", train.header.step.text())
    return int(match.group(1)) if match else 0


def _console(train: TrainPage) -> str:
    run_dir = train.controller.model.run_dir
    return (run_dir / "console.log").read_text(encoding="utf-8")[-3000:] if run_dir else ""


@pytest.mark.slow
def test_a_new_person_walks_from_their_kohya_folder_to_an_exported_bundle(
        qtbot: QtBot, window: MainWindow, tmp_path: Path, tiny_sd15: Path, tiny_tagger: Path, fake_hub: FakeHub,
        monkeypatch: pytest.MonkeyPatch) -> None:
    hold_at(monkeypatch, HELD_AT)
    started = time.monotonic()
    cat = _kohya_folder(tmp_path)
    mydata = cat.parent
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda _parent, _title, text, *_a: asked.append(text) or QMessageBox.StandardButton.Yes)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *_a, **_k: str(mydata))
    # The stand-in hub holds the tagger the studio knows as wd14-vit-v3 (and files it must not fetch).
    fake_hub.repos[TAGGER_REPO] = {"model.onnx": (tiny_tagger / "model.onnx").read_bytes(),
                                   "selected_tags.csv": (tiny_tagger / "selected_tags.csv").read_bytes(),
                                   "model.safetensors": bytes(4096), "README.md": b"# tagger"}
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    window.show()
    qtbot.waitUntil(lambda: window.page("page_dataset").isVisible(), timeout=10000)

    # 1. File → Open Project… on the kohya folder: a project is made there, one concept ×10.
    _action(window, "&Open Project…").trigger()
    assert asked and "kohya N_name folders: 1 concept, 4 images (10_mycat: 4 ×10)" in asked[-1]
    project = window.context.project
    assert project is not None and project.root == mydata.resolve() and (mydata / "studio.toml").is_file()
    dataset = window.show_page("page_dataset")
    assert dataset.wait_loaded(scaled_s(30))  # type: ignore[attr-defined]
    assert dataset.model.rowCount() == 4  # type: ignore[attr-defined]

    # 2. The image without a caption clicked in the grid, its caption typed; it is saved on its own.
    grid = dataset.view  # type: ignore[attr-defined]
    row = dataset.model.row_of(cat / "b.png")  # type: ignore[attr-defined]
    qtbot.mouseClick(grid.viewport(), LEFT, pos=grid.visualRect(dataset.model.index(row)).center())  # type: ignore[attr-defined]
    editor = dataset.editor  # type: ignore[attr-defined]
    assert editor.entry is not None and editor.entry.path.name == "b.png"
    qtbot.mouseClick(editor.text.viewport(), LEFT)
    # No caption file: the box shows what kohya trains it with, the folder's name; the typing goes after it.
    assert editor.text.toPlainText() == "mycat" and _caption(cat, "b.png") is None
    qtbot.keyClick(editor.text, Qt.Key.Key_End)
    qtbot.keyClicks(editor.text, TYPED.removeprefix("mycat"))
    qtbot.waitUntil(lambda: _caption(cat, "b.png") == TYPED, timeout=10000)

    # 3. Caption with…: the tagger the studio knows, not here yet, downloaded, then run on every image.
    _click(qtbot, dataset.toolbar.caption_button)  # type: ignore[attr-defined]
    dialog = dataset.tools.dialog  # type: ignore[attr-defined]
    assert dialog is not None and dialog.isVisible()
    dialog.model.setCurrentIndex(dialog.model.findData("wd14-vit-v3"))
    assert dialog.model.currentText().endswith("not downloaded") and "Press Download" in dialog.status.text()
    with qtbot.waitSignal(dialog.picker.sig_downloaded, timeout=60000):
        _click(qtbot, dialog.findChild(QPushButton, "caption_download"))
    assert not dialog.model.currentText().endswith("not downloaded")
    assert fake_hub.gets("model.onnx") and not fake_hub.gets("model.safetensors")  # only what the tagger loads
    dialog.scope.setCurrentIndex(dialog.scope.findData("All images"))
    dialog.mode.setCurrentIndex(dialog.mode.findData("append"))
    _click(qtbot, dialog.start_button)
    qtbot.waitUntil(lambda: not dialog.job.running, timeout=60000)
    assert dialog.status.text() == "Done: 4 captions to review.", dialog.status.text()
    _click(qtbot, dialog.accept_all_button)
    qtbot.waitUntil(lambda: "hatsune miku" in (_caption(cat, "d.png") or ""), timeout=10000)
    written = {name: _caption(cat, name) for name in CAPTIONS}
    assert written["b.png"] is not None and written["b.png"].startswith(TYPED + ", ")  # the person's words first
    assert written["a.png"] is not None and written["a.png"].startswith("mycat, red, ")
    assert all("hatsune miku" in (text or "") for text in written.values()), written
    dialog.close()

    # 4. Model & Preset. First a FLUX.2 [klein] 9B preset: its card is estimated on the 9B, and using it brings
    # the 9B base with it (the project's base was SD1.5's default, not one the person chose: nothing to ask).
    model_page = window.show_page("page_model")
    nine_b = model_page.findChild(QWidget, "preset_card_flux2-klein-9b-lora-40gb")
    assert nine_b.findChild(QLabel, "preset_estimate").text().startswith("promises 40 GB")
    _click(qtbot, model_page.findChild(QPushButton, "use_flux2-klein-9b-lora-40gb"))
    klein = load_config(mydata / "studio.toml")
    assert (klein.model.family, klein.model.base) == ("flux2-klein", "black-forest-labs/FLUX.2-klein-base-9B")
    # Then the SD1.5 LoRA preset, the tiny model typed in, sized for it; then Train.
    _click(qtbot, model_page.findChild(QPushButton, "use_sd15-lora"))
    _type_into(qtbot, model_page.base, str(tiny_sd15))  # type: ignore[attr-defined]
    form = model_page.form  # type: ignore[attr-defined]
    for key, value in (("dataset.resolution", "64"), ("training.max_steps", str(STEPS)),
                       ("training.lr_warmup_steps", "0")):
        editor_widget = form.editors[key]
        if not editor_widget.isVisible():
            _click(qtbot, form.show_advanced)
        _type_into(qtbot, editor_widget if not isinstance(editor_widget, QSpinBox) else editor_widget.lineEdit(),
                   value)
        editor_widget.clearFocus()  # a spin box takes its value when it loses the focus
    config = window.context.config
    assert config is not None, window.context.config_error
    assert (config.model.base, config.dataset.resolution, config.training.max_steps) == (str(tiny_sd15), 64, STEPS)
    assert (config.method.kind, config.method.rank, config.training.lr_scheduler) == ("lora", 16, "cosine")
    assert f"max_steps = {STEPS}" in (mydata / "studio.toml").read_text(encoding="utf-8")

    # Loss masks from a folder: masks = folder asks for the folder at once (not refused for lack of it), and
    # the folder chosen with its Folder… button completes it. TensorBoard ticked beside the other settings.
    masks = _masks_folder(mydata)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *_a, **_k: str(masks))
    masks_box = form.editors["dataset.masks"]
    qtbot.keyClick(masks_box, Qt.Key.Key_Down)  # none → folder
    assert masks_box.currentText() == "folder" and model_page.error.text() == ""  # type: ignore[attr-defined]
    assert "Choose the folder of mask images" in form.error_labels["dataset.mask_folder"].text()
    _click(qtbot, form.findChild(QPushButton, "browse_dataset_mask_folder"))
    _click(qtbot, form.findChild(QCheckBox, "field_output_log_to_tensorboard"))
    config = window.context.config
    assert config is not None, window.context.config_error
    assert (config.dataset.masks, config.dataset.mask_folder, config.output.log_to) == ("folder", "masks",
                                                                                       ["tensorboard"])

    train = window.show_page("page_train")
    assert isinstance(train, TrainPage)
    _click(qtbot, train.train_button)
    assert train.controller.running, train.message.text()
    _wait_run(qtbot, train, lambda: _shown_step(train) >= HELD_AT, "step 2 on the Train page")
    _click(qtbot, train.stop_button)
    _wait_run(qtbot, train, lambda: not train.controller.running, "the stopped run to end")
    assert train.controller.model.status == "stopped", _console(train)
    stopped_at = train.controller.model.step
    assert stopped_at == HELD_AT and "stopped" in train.header.status.text()
    print(f"\nstopped at step {stopped_at} of {STEPS}")

    # Resume on the Train page itself: the run goes on from its checkpoint to the end.
    _click(qtbot, train.resume_button)
    assert train.controller.running and not train.resume_button.isEnabled()
    _wait_run(qtbot, train, lambda: not train.controller.running, "the resumed run to end")
    model = train.controller.model
    assert model.status == "finished", _console(train)
    assert model.started is not None and model.started.resumed_from_step == stopped_at
    run_dir = model.run_dir
    assert run_dir is not None and run_dir.parent == mydata / "runs"
    lora = run_dir / "output" / "pytorch_lora_weights.safetensors"
    assert lora.is_file() and lora.stat().st_size > 1000
    assert 'masks = "folder"' in (run_dir / "config.toml").read_text(encoding="utf-8")
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents.*")), _console(train)  # TensorBoard's files
    steps, loss = train.plots.loss.raw.getData()
    assert list(steps) == list(range(1, STEPS + 1)) and np.isfinite(loss).all()
    assert train.header.step.text() == f"{STEPS} / {STEPS}"

    # 5. Runs: the run listed as completed, selected; then Export writes a bundle with the tiny model in it.
    runs = window.show_page("page_runs")
    table = runs.table  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: [s.name for s in table.summaries] == [run_dir.name], timeout=10000)
    qtbot.mouseClick(table.viewport(), LEFT, pos=table.visualItemRect(table.item(0, 0)).center())
    assert [s.name for s in table.selected()] == [run_dir.name]
    status_column = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())].index("Status")
    assert table.item(0, status_column).text() == "completed"
    assert runs.buttons["output"].isEnabled()  # type: ignore[attr-defined]

    export = window.show_page("page_export")
    assert export.findChild(QCheckBox, "export_include_model").isChecked()  # the tiny model goes in the bundle
    out = Path(export.out_edit.text())  # type: ignore[attr-defined]
    assert out.parent == mydata / "exports"
    _click(qtbot, export.export_button)  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: export.report is not None  # type: ignore[attr-defined]
                    or export.result.toPlainText().startswith("The bundle was not"), timeout=60000)  # type: ignore[attr-defined]
    assert export.report is not None, export.result.toPlainText()  # type: ignore[attr-defined]
    assert (out / "config.toml").is_file() and (out / "README.md").is_file()
    assert any(p.name == "b.txt" and p.read_text(encoding="utf-8").startswith(TYPED) for p in out.rglob("b.txt"))
    assert any(p.name == "model_index.json" for p in out.rglob("model_index.json"))
    print(f"\nthe walk took {time.monotonic() - started:.1f} s")
