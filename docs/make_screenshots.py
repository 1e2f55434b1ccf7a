"""Regenerate the tutorial's screenshots (docs/tutorial.md) from a scripted session of the real app.

    .venv/bin/python docs/make_screenshots.py                     # every shot: trains the demo (minutes on a CPU)
    .venv/bin/python docs/make_screenshots.py install first-start  # only these
    .venv/bin/python docs/make_screenshots.py caption --out /tmp/shots  # elsewhere

One window on the offscreen platform lives through the tutorial in order: the training
environment is set up (from stand-in wheels, so nothing is downloaded), the demo project
opens, a caption is edited, a preset is picked for an RTX 4090, the demo trains, is
stopped, resumed and exported. Widgets are found by their objectName (gui/page.py
`named`); each shot is `docs/images/<name>.png`. `SHOTS` is the list the docs' test
checks docs/tutorial.md against.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
WINDOW_SIZE = (1280, 800)
TRAIN_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Shot:
    name: str  # docs/images/<name>.png
    step: str  # what the person does, as the tutorial's heading says it
    take: Callable[[Session], object]  # returns the QWidget or QPixmap to save
    trains: bool = False  # needs the demo's tiny model and a training run


class Session:
    """The app, one main window, and the folders the session writes (never the person's own)."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        for name in ("STUDIO_CONFIG_DIR", "STUDIO_DATA_DIR", "STUDIO_CACHE_DIR"):
            os.environ[name] = str(scratch / name.lower())
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["STUDIO_HARDWARE"] = str(self._workstation_profile())
        from studio.gui.context import StudioContext
        from studio.gui.shell.application import make_application, make_settings
        from studio.gui.shell.main_window import MainWindow

        self.app = make_application()
        self.context = StudioContext(make_settings(scratch / "settings.ini"), hardware_file=os.environ["STUDIO_HARDWARE"])
        self.window = MainWindow(self.context)
        self.window.resize(*WINDOW_SIZE)
        self.window.show()
        self.wait(lambda: False, 0.5)
        self.project: object | None = None
        self.model_built = False

    def _workstation_profile(self) -> Path:
        """The RTX 4090 profile with a current driver (the shipped one is older than PyTorch's builds)."""
        profile = json.loads((ROOT / "resources" / "hardware" / "rtx4090-24gb.json").read_text())
        profile["gpus"][0].update(driver="575.64.03", cuda="12.9")
        path = self.scratch / "rtx4090-workstation.json"
        path.write_text(json.dumps(profile))
        return path

    def wait(self, condition: Callable[[], bool], seconds: float) -> bool:
        from studio.gui.base.event_loop import wait_for

        return wait_for(condition, seconds)

    def find(self, kind: type, name: str) -> object:
        widget = self.window.findChild(kind, name)
        if widget is None:
            raise LookupError(f"no {kind.__name__} named '{name}' in the window: the screenshot script needs updating")
        return widget

    def show_page(self, page_id: str) -> object:
        self.window.show_page(page_id)
        self.wait(lambda: False, 0.3)
        return self.window.stack.currentWidget()

    def open_demo(self, with_model: bool) -> object:
        """The demo project, opened once; its tiny model is built when a shot first needs it."""
        from studio.core.project.demo import create_demo_project

        if self.project is None or (with_model and not self.model_built):
            self.project = create_demo_project(self.scratch / "demo-project", build_model=with_model)
            self.model_built = with_model
            self.window.set_project(self.project)
            self.wait(lambda: False, 1.0)
        elif self.context.project is None or self.context.project.root != self.project.root:  # type: ignore[attr-defined]
            self.window.set_project(self.project)  # back from another shot's project (the edit pairs')
            self.wait(lambda: False, 1.0)
        return self.project


# ---------------------------------------------------------------- the shots, in the tutorial's order


def shot_install(session: Session) -> object:
    """The Training Environment window halfway through its install."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fixtures.wheelhouse import standin_wheelhouse

    from studio.core.trainenv.packages import CONSTRAINTS
    from studio.gui.trainenv.window import TrainingEnvDialog

    os.environ["STUDIO_WHEELHOUSE"] = str(standin_wheelhouse(session.scratch / "wheels", ROOT / CONSTRAINTS))
    # Its own folder: the demo below trains with this interpreter, not with the stand-in wheels.
    dialog = TrainingEnvDialog(session.window, folder=session.scratch / "tutorial-env")
    dialog.show()
    session.wait(lambda: dialog.install_button.isEnabled(), 60)
    dialog.install_button.click()
    session.wait(lambda: "training libraries" in dialog.progress_label.text() or not dialog.installing, 180)
    pixmap = dialog.grab()
    dialog.cancel_install()
    session.wait(lambda: not dialog.installing, 60)
    dialog.close()
    return pixmap


def shot_first_start(session: Session) -> object:
    session.open_demo(with_model=False)
    session.show_page("page_dataset")
    session.wait(lambda: False, 3.0)  # the thumbnails load in the background
    return session.window


def shot_open_folder(session: Session) -> object:
    """The File menu, drawn over the window."""
    from PySide6.QtGui import QPainter

    menu = session.window.menuBar().actions()[0].menu()
    bar = session.window.menuBar()
    menu.popup(bar.mapToGlobal(bar.actionGeometry(bar.actions()[0]).bottomLeft()))
    session.wait(lambda: False, 0.3)
    pixmap = session.window.grab()
    painter = QPainter(pixmap)
    painter.drawPixmap(session.window.mapFromGlobal(menu.pos()), menu.grab())
    painter.end()
    menu.hide()
    return pixmap


def shot_caption(session: Session) -> object:
    from PySide6.QtWidgets import QAbstractItemView, QPlainTextEdit

    page = session.show_page("page_dataset")
    grid = page.findChild(QAbstractItemView)
    session.wait(lambda: grid.model() is not None and grid.model().rowCount() > 0, 30)
    grid.setCurrentIndex(grid.model().index(2, 0))
    session.wait(lambda: False, 0.5)
    editor = page.findChild(QPlainTextEdit)
    editor.setFocus()
    editor.moveCursor(editor.textCursor().MoveOperation.End)
    editor.insertPlainText(", flat colours")
    session.wait(lambda: False, 0.5)
    return session.window


def grab_dialog(session: Session, open_it: Callable[[], object]) -> object:
    """Open a dialog (modal ones run their own event loop), grab it once shown, close it."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QDialog

    grabbed: list[object] = []

    def grab_when_shown() -> None:
        dialog = QApplication.activeModalWidget() or next(
            (w for w in QApplication.topLevelWidgets() if isinstance(w, QDialog) and w.isVisible()), None)
        if dialog is None:
            QTimer.singleShot(100, grab_when_shown)
            return
        session.wait(lambda: False, 0.3)
        grabbed.append(dialog.grab())
        dialog.reject()

    QTimer.singleShot(200, grab_when_shown)
    open_it()
    if not session.wait(lambda: bool(grabbed), 10):
        raise LookupError("no dialog appeared: the screenshot script needs updating")
    return grabbed[0]


def shot_bulk_edit(session: Session) -> object:
    from PySide6.QtWidgets import QPushButton

    page = session.show_page("page_dataset")
    button = next(b for b in page.findChildren(QPushButton) if b.text().startswith("Bulk edit"))
    return grab_dialog(session, button.click)


def shot_preset(session: Session) -> object:
    from PySide6.QtWidgets import QWidget

    session.open_demo(with_model=True)  # the page names the base model it finds
    page = session.show_page("page_model")
    session.wait(lambda: page.findChild(QWidget, "gpu_card_0") is not None, 30)
    card = page.findChild(QWidget, "preset_card_sd15-lora")
    if card is not None:
        card.setFocus()
    session.wait(lambda: False, 1.0)
    return session.window


def _presets_of(session: Session, title: str) -> object:
    """The Model page's presets filtered to one family, each estimated for the RTX 4090."""
    from PySide6.QtWidgets import QComboBox, QWidget

    session.open_demo(with_model=True)
    page = session.show_page("page_model")
    session.wait(lambda: page.findChild(QWidget, "gpu_card_0") is not None, 30)
    family = page.findChild(QComboBox, "preset_family")
    family.setCurrentIndex(family.findText(title))
    session.wait(lambda: False, 0.5)
    _scroll_to(page, family, 8)
    return session.window


def _scroll_to(page: object, widget: object, margin: int) -> None:
    """Scroll the page's pane that holds `widget` so that it sits `margin` pixels below the pane's top."""
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QScrollArea

    area = next(a for a in page.findChildren(QScrollArea) if a.widget().isAncestorOf(widget))  # type: ignore[attr-defined]
    area.verticalScrollBar().setValue(widget.mapTo(area.widget(), QPoint(0, 0)).y() - margin)  # type: ignore[attr-defined]
    from studio.gui.base.event_loop import wait_for

    wait_for(lambda: False, 1.0)


def shot_klein(session: Session) -> object:
    return _presets_of(session, "FLUX.2 [klein]")


def shot_zimage(session: Session) -> object:
    return _presets_of(session, "Z-Image")


def shot_masks(session: Session) -> object:
    """masks = folder chosen in the form: the mask folder's field appears, asking for the folder."""
    from PySide6.QtWidgets import QComboBox, QLineEdit

    session.open_demo(with_model=True)
    page = session.show_page("page_model")
    family = page.findChild(QComboBox, "preset_family")
    family.setCurrentIndex(0)
    page.form.show_advanced.setChecked(True)
    masks = page.form.findChild(QComboBox, "field_dataset_masks")
    masks.setCurrentIndex(masks.findData("folder"))
    masks.activated.emit(masks.currentIndex())
    folder = page.form.findChild(QLineEdit, "field_dataset_mask_folder")
    session.wait(lambda: folder.isVisibleTo(page), 10)
    session.wait(lambda: False, 0.5)
    _scroll_to(page, masks, 120)
    return session.window


def shot_edit_pairs(session: Session) -> object:
    """A project of edit pairs (a control/ folder beside the targets) on the Dataset page, one pair chosen."""
    from PIL import Image, ImageOps
    from PySide6.QtWidgets import QAbstractItemView

    from studio.core.dataset.demo_shapes import write_demo_dataset
    from studio.core.families.flux2_klein import BASE_MODELS
    from studio.core.project.folder import config_for_images, create_project

    root = session.scratch / "edit-project"
    pairs = root / "pairs"
    write_demo_dataset(pairs, count=6, size=256, seed=7)
    for target in sorted(pairs.glob("*.png")):
        (pairs / "control").mkdir(exist_ok=True)
        target.rename(pairs / "control" / target.name)
        with Image.open(pairs / "control" / target.name) as before:
            ImageOps.invert(before.convert("RGB")).save(target)
        target.with_suffix(".txt").write_text("make it a negative", encoding="utf-8")
    config = config_for_images(root, [pairs], family="flux2-klein", base=BASE_MODELS["4b"])
    session.window.set_project(create_project(root, config))
    page = session.show_page("page_dataset")
    grid = page.findChild(QAbstractItemView)
    session.wait(lambda: grid.model() is not None and grid.model().rowCount() > 0, 30)
    grid.setCurrentIndex(grid.model().index(1, 0))
    session.wait(lambda: False, 3.0)  # the thumbnails load in the background
    return session.window


def _train_page(session: Session) -> object:
    return session.show_page("page_train")


def shot_train(session: Session) -> object:
    session.open_demo(with_model=True)
    page = _train_page(session)
    page.train_button.click()
    session.wait(lambda: page.controller.model.step >= 5, TRAIN_TIMEOUT_S)
    return session.window


def shot_watch(session: Session) -> object:
    page = _train_page(session)
    session.wait(lambda: page.controller.model.step >= 22 and bool(page.controller.model.samples), TRAIN_TIMEOUT_S)
    page.tabs.setCurrentWidget(page.samples)
    session.wait(lambda: False, 1.0)
    return session.window


def shot_stop(session: Session) -> object:
    page = _train_page(session)
    page.tabs.setCurrentWidget(page.plots)
    page.stop_button.click()
    session.wait(lambda: not page.controller.running, TRAIN_TIMEOUT_S)
    session.wait(lambda: False, 1.0)
    return session.window


def shot_resume(session: Session) -> object:
    from PySide6.QtWidgets import QWidget

    page = session.show_page("page_runs")
    page.refresh()
    page.table.selectRow(0)
    page.open_run(page.table.summaries[0].path)  # its plots, replayed from events.jsonl
    session.wait(lambda: False, 1.0)
    pixmap = session.window.grab()
    if page.resume_selected():
        train = session.window.findChild(QWidget, "page_train")
        session.wait(lambda: not train.controller.running, TRAIN_TIMEOUT_S)
    return pixmap


def shot_run_samples(session: Session) -> object:
    """The resumed run, finished, on the Runs page with its Samples tab: its pictures step by step."""
    page = session.show_page("page_runs")
    page.refresh()
    page.table.selectRow(0)
    page.open_run(page.table.summaries[0].path)
    page.views.setCurrentWidget(page.samples)
    session.wait(lambda: page.samples.slider.maximum() > 0, 30)
    page.samples.slider.setValue(page.samples.slider.maximum())
    session.wait(lambda: False, 1.0)
    return session.window


def shot_export(session: Session) -> object:
    session.show_page("page_export")
    session.wait(lambda: False, 1.0)
    return session.window


SHOTS: list[Shot] = [
    Shot("01-install", "Set up the training environment", shot_install),
    Shot("02-first-start", "First start: the demo project", shot_first_start),
    Shot("03-open-folder", "Open your folder", shot_open_folder),
    Shot("04-caption", "Caption your images", shot_caption),
    Shot("05-bulk-edit", "Edit many captions at once", shot_bulk_edit),
    Shot("06-preset", "Pick a preset that fits", shot_preset),
    Shot("06b-klein", "FLUX.2 [klein] presets", shot_klein),
    Shot("06c-zimage", "Z-Image presets", shot_zimage),
    Shot("06d-masks", "Loss masks from a folder", shot_masks),
    Shot("06e-edit-pairs", "Edit pairs: before and after", shot_edit_pairs),
    Shot("07-train", "Train", shot_train, trains=True),
    Shot("08-watch", "Watch it learn", shot_watch, trains=True),
    Shot("09-stop", "Stop", shot_stop, trains=True),
    Shot("10-resume", "Resume", shot_resume, trains=True),
    Shot("10b-run-samples", "Compare the samples of runs", shot_run_samples, trains=True),
    Shot("11-export", "Export for rented GPUs", shot_export, trains=True),
]


def save(image: object, path: Path) -> None:
    from PySide6.QtGui import QPixmap

    pixmap = image if isinstance(image, QPixmap) else image.grab()  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True, exist_ok=True)
    if not pixmap.save(str(path)):
        raise OSError(f"could not write {path}")


def take(names: list[str], out: Path = IMAGES, scratch: Path | None = None) -> list[Path]:
    """Take the named shots (all when empty) in the tutorial's order; returns the files written."""
    unknown = set(names) - {s.name for s in SHOTS} - {s.name.split("-", 1)[1] for s in SHOTS}
    if unknown:
        raise SystemExit(f"unknown shots {sorted(unknown)}; the shots are {[s.name for s in SHOTS]}")
    chosen = [s for s in SHOTS if not names or s.name in names or s.name.split("-", 1)[1] in names]
    written = []
    # A plain, stable folder name: it shows in the window's status bar and dialogs.
    scratch = scratch or Path(tempfile.gettempdir()) / "training-studio-tutorial"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        session = Session(scratch)
        try:
            for shot in chosen:
                path = out / f"{shot.name}.png"
                save(shot.take(session), path)
                written.append(path)
                print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {shot.step}", flush=True)
        finally:
            session.window.close()
            session.app.processEvents()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return written


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shots", nargs="*", help="names of shots to take (default: all), e.g. install caption")
    parser.add_argument("--out", type=Path, default=IMAGES, help="folder for the PNG files (default: docs/images)")
    parser.add_argument("--scratch", type=Path, help="the session's folder, emptied first (default: "
                        "training-studio-tutorial in the temporary folder)")
    args = parser.parse_args(argv)
    take(args.shots, args.out, args.scratch)


if __name__ == "__main__":
    main(sys.argv[1:])
