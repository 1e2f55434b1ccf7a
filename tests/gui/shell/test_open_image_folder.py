"""A folder of images opened as a project: the question says what was found in words a person reads, and a
folder with img/ and masks/ side by side opens as a project whose masks weight the loss (masks/ is the mask
folder, not a second training concept)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtWidgets import QMessageBox

from studio.core.config.files.toml_file import load_config
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


def test_the_new_project_wizard_on_img_and_masks_makes_masks_the_mask_folder(qtbot, tmp_path: Path) -> None:
    from PySide6.QtWidgets import QWizard

    photos = tmp_path / "photos"
    for sub in ("img", "masks"):
        (photos / sub).mkdir(parents=True)
    Image.new("RGB", (64, 64)).save(photos / "img" / "cat.jpg")
    Image.new("L", (64, 64), 255).save(photos / "masks" / "cat.png")
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(window)
    wizard = window.new_project_wizard()
    qtbot.addWidget(wizard)
    wizard.show()
    wizard.images_page.folder.setText(str(tmp_path / "cat project"))  # type: ignore[attr-defined]
    wizard.images_page.add_image_folder(photos)  # type: ignore[attr-defined]
    assert wizard.images_page.layout_label.text() == (  # type: ignore[attr-defined]
        "photos: one subfolder per concept: 1 concept, 1 image (img: 1); loss masks in masks")
    with qtbot.waitSignal(wizard.accepted, timeout=5000):
        wizard.button(QWizard.WizardButton.FinishButton).click()
    dataset = window.context.project.load_config().dataset  # type: ignore[union-attr]
    assert [c.path for c in dataset.concepts] == ["../photos/img"]
    assert (dataset.masks, dataset.mask_folder) == ("folder", "../photos/masks")
