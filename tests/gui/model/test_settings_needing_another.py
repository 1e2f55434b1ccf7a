"""Settings that need another filled in are turned on in the form in either order: masks = folder asks for
the mask folder, validation fraction for validation every (and the other way round), each shown at once and
taken together once filled in; what would hold images out for nothing, or name a folder that is not there,
is said where the person typed it."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit, QPushButton, QSpinBox, QWidget

from studio.core.config.errors import ConfigError
from studio.core.config.files.toml_file import load_config


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



def _type(field: QLineEdit | QSpinBox, text: str) -> None:
    if isinstance(field, QSpinBox):
        field.setValue(int(text))
    else:
        field.setText(text)
    field.editingFinished.emit()


def test_a_fraction_waits_for_validation_every_and_both_are_taken(make_page) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    fraction = page.form.findChild(QLineEdit, "field_dataset_validation_fraction")
    every = page.form.findChild(QSpinBox, "field_training_validation_every")
    config_path = page.context.project.config_path

    _type(fraction, "0.1")  # images held out, but the loss never measured: not taken alone
    note = page.form.findChild(QLabel, "error_training_validation_every")
    assert note.isVisibleTo(page) and note.text().startswith("↳ Set validation every (e.g. 100)")
    assert page.error.text() == "" and fraction.text() == "0.1"
    assert load_config(config_path).dataset.validation_fraction == 0

    _type(every, "50")
    saved = load_config(config_path)
    assert (saved.dataset.validation_fraction, saved.training.validation_every) == (0.1, 50)
    assert not note.isVisibleTo(page)

    # Turned off from either end: validation every = 0 takes the held-out share back to 0, and the other way.
    said: list[str] = []
    page.context.sig_status.connect(said.append)
    _type(every, "0")
    saved = load_config(config_path)
    assert (saved.dataset.validation_fraction, saved.training.validation_every) == (0, 0)
    assert fraction.text() == "0" and page.error.text() == ""
    assert said[-1] == "Back to their defaults (they do not act now): validation fraction"
    _type(fraction, "0.1")
    _type(every, "50")
    _type(fraction, "0")
    saved = load_config(config_path)
    assert (saved.dataset.validation_fraction, saved.training.validation_every) == (0, 0)
    assert every.value() == 0 and page.error.text() == ""


def test_validation_every_waits_for_held_out_images(make_page) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    _type(page.form.findChild(QSpinBox, "field_training_validation_every"), "100")
    note = page.form.findChild(QLabel, "error_dataset_validation_fraction")
    assert note.isVisibleTo(page) and "Set validation fraction (e.g. 0.1) or a validation folder" in note.text()
    _type(page.form.findChild(QLineEdit, "field_dataset_validation_fraction"), "0.2")
    saved = load_config(page.context.project.config_path)
    assert (saved.dataset.validation_fraction, saved.training.validation_every) == (0.2, 100)


def test_a_validation_folder_that_is_not_there_is_said_under_it(make_page) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    _type(page.form.findChild(QSpinBox, "field_training_validation_every"), "100")
    _type(page.form.findChild(QLineEdit, "field_dataset_validation_folder"), "held-out")
    assert load_config(page.context.project.config_path).dataset.validation_folder == "held-out"
    note = page.form.findChild(QLabel, "error_dataset_validation_folder")
    assert note.isVisibleTo(page)
    assert note.text() == "⚠ held-out does not exist: create it, or choose another folder with Folder…"


def test_a_fraction_without_validation_every_in_the_toml_is_refused_with_what_to_do(make_page) -> None:
    page = make_page()
    text = page.context.project.config_path.read_text()
    try:
        page.context.apply_toml(text.replace("[[dataset.concepts]]", "[dataset]\nvalidation_fraction = 0.1\n\n[[dataset.concepts]]"))
    except ConfigError as exc:
        message = exc.describe()
    else:
        raise AssertionError("a share held out for nothing was taken")
    assert "dataset.validation_fraction" in message and "never measured" in message
    assert "set training.validation_every (e.g. 100)" in message


def test_max_steps_set_puts_epochs_back_and_hides_them(make_page) -> None:
    # Both were kept and max_steps won: the epochs shown were never trained.
    page = make_page()
    assert page.apply_config_changes({"training.epochs": 12, "training.max_steps": None})
    epochs = page.form.findChild(QLineEdit, "field_training_epochs")  # optional: a line, empty for none
    assert epochs is not None and epochs.isVisibleTo(page)
    assert page.apply_config_changes({"training.max_steps": 500})
    saved = load_config(page.context.project.config_path).training
    assert (saved.max_steps, saved.epochs) == (500, None)
    assert not epochs.isVisibleTo(page)
    assert page.apply_config_changes({"training.max_steps": None})
    assert epochs.isVisibleTo(page)
