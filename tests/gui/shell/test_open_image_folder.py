"""A folder of images opened as a project: the question says what was found in words a person reads, and a
folder with img/ and masks/ side by side opens as a project whose masks weight the loss (masks/ is the mask
folder, not a second training concept)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtWidgets import QMessageBox

from studio.core.config.toml_file import load_config
from studio.core.project.folder import PROJECT_FILE
from studio.gui.context import StudioContext
from studio.gui.shell.application import make_settings
from studio.gui.shell.main_window import MainWindow


def test_opening_img_and_masks_makes_masks_the_mask_folder(qtbot, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "cats"
    for sub in ("img", "masks"):
        (folder / sub).mkdir(parents=True)
    for name in ("cat1", "cat2"):
        Image.new("RGB", (64, 64), (200, 90, 90)).save(folder / "img" / f"{name}.jpg")
        Image.new("L", (64, 64), 255).save(folder / "masks" / f"{name}.png")
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(window)
    asked: list[str] = []

    def answer(_parent: object, _title: str, text: str, *_a: object) -> QMessageBox.StandardButton:
        asked.append(text)
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", answer)
    assert window.open_project_path(folder)
    assert "1 concept, 2 images (img: 2); loss masks in masks" in asked[0]
    dataset = load_config(folder / PROJECT_FILE).dataset
    assert [c.path for c in dataset.concepts] == ["img"]
    assert (dataset.masks, dataset.mask_folder) == ("folder", "masks")


def test_a_folder_named_masks_of_other_images_stays_a_concept(qtbot, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "costumes"
    for sub in ("img", "masks"):
        (folder / sub).mkdir(parents=True)
    Image.new("RGB", (64, 64)).save(folder / "img" / "person.jpg")
    Image.new("RGB", (64, 64)).save(folder / "masks" / "carnival.jpg")  # pictures of masks, not loss masks
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(window)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    assert window.open_project_path(folder)
    dataset = load_config(folder / PROJECT_FILE).dataset
    assert [c.path for c in dataset.concepts] == ["img", "masks"] and dataset.masks == "none"


def test_a_folder_of_images_is_described_without_a_dot(qtbot, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "dogs"
    folder.mkdir()
    for name in ("dog1", "dog2", "dog3"):
        Image.new("RGB", (64, 64)).save(folder / f"{name}.png")
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(window)
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda _parent, _title, text, *_a: asked.append(text) or QMessageBox.StandardButton.No)
    assert not window.open_project_path(folder)
    assert "Found: images in the folder: 1 concept, 3 images." in asked[0]  # not "3 images (.: 3)"
