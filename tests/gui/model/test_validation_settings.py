"""The validation loss is turned on in the settings form in either order, and what would hold images out
for nothing, or name a folder that is not there, is said where the person typed it."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QLineEdit, QSpinBox

from studio.core.config.errors import ConfigError
from studio.core.config.toml_file import load_config


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
