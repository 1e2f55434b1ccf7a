"""A value refused in a field that then stops acting (EMA decay typed as 1, then EMA turned off) leaves with its
row: it stayed behind the hidden row, and Train asked about "values refused in the settings form" that the
page no longer showed."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QLineEdit


def test_a_refused_value_goes_with_its_hidden_row(make_page) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    ema = page.form.findChild(QCheckBox, "field_training_ema")
    ema.setChecked(True)  # emits the change
    decay = page.form.findChild(QLineEdit, "field_training_ema_decay")
    assert decay.isVisibleTo(page)
    decay.setText("1")
    decay.editingFinished.emit()
    assert "training.ema_decay" in page.form.invalid
    assert page.context.pending_edits() == ["values refused in the settings form"]

    ema.setChecked(False)
    assert not decay.isVisibleTo(page)
    assert page.context.pending_edits() == []
    ema.setChecked(True)
    assert decay.text() == "0.999" and not page.form.error_labels["training.ema_decay"].isVisibleTo(page)
