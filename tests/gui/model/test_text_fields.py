"""A text setting emptied on the Model page is saved empty: clearing the negative prompt there was refused
("input should be a valid string") and the old one stayed in studio.toml."""

from __future__ import annotations

from PySide6.QtWidgets import QLineEdit

from studio.core.config.files.toml_file import load_config


def test_the_negative_prompt_can_be_emptied(make_page) -> None:
    page = make_page()
    path = page.context.project.config_path
    field = page.form.findChild(QLineEdit, "field_sampling_negative_prompt")
    field.setText("blurry, watermark")
    field.editingFinished.emit()
    assert load_config(path).sampling.negative_prompt == "blurry, watermark"
    field.setText("")
    field.editingFinished.emit()
    assert load_config(path).sampling.negative_prompt == ""
    assert "sampling.negative_prompt" not in page.form.invalid
    assert not page.error.text()
