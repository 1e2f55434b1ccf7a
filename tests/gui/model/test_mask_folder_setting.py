"""Masks from a folder are turned on in the settings form: choosing masks = folder shows the mask-folder
field at once and is taken once a folder is chosen, not refused before the person can fill it in."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit, QPushButton, QWidget

from studio.core.config.toml_file import load_config


def _choose(combo: QComboBox, value: str) -> None:
    combo.setCurrentIndex(combo.findData(value))
    combo.activated.emit(combo.currentIndex())


def test_choosing_masks_from_a_folder_asks_for_the_folder_and_takes_both(make_page, monkeypatch) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    masks = page.form.findChild(QComboBox, "field_dataset_masks")
    folder_field = page.form.findChild(QLineEdit, "field_dataset_mask_folder")
    assert not folder_field.isVisibleTo(page)  # masks = none: no mask folder to name

    _choose(masks, "folder")
    assert page.error.text() == ""  # not refused with "needs dataset.mask_folder"
    assert masks.currentText() == "folder"
    assert folder_field.isVisibleTo(page)
    note = page.form.findChild(QLabel, "error_dataset_mask_folder")
    assert note.isVisibleTo(page) and "Choose the folder of mask images" in note.text()
    config_path = page.context.project.config_path
    assert load_config(config_path).dataset.masks == "none"  # nothing half-done in studio.toml yet

    # An edit elsewhere meanwhile is taken; the choice keeps waiting for its folder.
    page.on_field_changed("dataset.flip", True)
    assert load_config(config_path).dataset.flip is True
    assert masks.currentText() == "folder" and folder_field.isVisibleTo(page)

    masks_dir = page.context.project.root / "masks"
    masks_dir.mkdir()
    seen: list[str] = []

    def choose_dir(_parent: QWidget, _title: str, start: str) -> str:
        seen.append(start)
        return str(masks_dir)

    monkeypatch.setattr("studio.gui.model.page.QFileDialog.getExistingDirectory", choose_dir)
    page.form.findChild(QPushButton, "browse_dataset_mask_folder").click()
    assert seen == [str(page.context.project.root)]  # the dialog opens in the project's folder
    saved = load_config(config_path).dataset
    assert (saved.masks, saved.mask_folder) == ("folder", "masks")
    assert folder_field.text() == "masks" and not note.isVisibleTo(page)
    assert page.error.text() == ""


def test_a_folder_typed_completes_the_choice_and_none_takes_it_back(make_page) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    masks = page.form.findChild(QComboBox, "field_dataset_masks")
    config_path = page.context.project.config_path

    _choose(masks, "folder")
    _choose(masks, "none")  # changed their mind: nothing waits any more
    assert not page.form.findChild(QLineEdit, "field_dataset_mask_folder").isVisibleTo(page)
    assert page.context.pending_edits() == []

    _choose(masks, "folder")
    assert page.context.pending_edits()  # a choice not in studio.toml yet
    folder_field = page.form.findChild(QLineEdit, "field_dataset_mask_folder")
    folder_field.setText("my masks")
    folder_field.editingFinished.emit()
    saved = load_config(config_path).dataset
    assert (saved.masks, saved.mask_folder) == ("folder", "my masks")
    assert page.context.pending_edits() == []
