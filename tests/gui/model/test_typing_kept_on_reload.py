"""studio.toml changed by another program while a person types in a Model-page field: the typing stays, the
file's value for that field is said under it, and Enter saves both the typed value and the other change."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QLineEdit, QSpinBox

from studio.core.config.files.toml_file import load_config


def test_a_value_being_typed_survives_the_file_read_again(make_page, qtbot) -> None:
    page = make_page()
    path = page.context.project.config_path
    rate = page.form.findChild(QLineEdit, "field_training_learning_rate")
    rate.selectAll()
    qtbot.keyClicks(rate, "0.0003")  # not finished: no Enter yet

    # Another program sets the rate and the steps.
    path.write_text(path.read_text() + "\n[training]\nmax_steps = 77\nlearning_rate = 0.0005\n")
    assert page.context.watcher.check()
    assert page.config.training.max_steps == 77
    assert rate.text() == "0.0003"
    note = page.form.findChild(QLabel, "error_training_learning_rate")
    assert not note.isHidden()
    assert "changed on disk" in note.text() and "0.0005" in note.text()

    qtbot.keyClick(rate, Qt.Key.Key_Return)
    saved = load_config(path)
    assert saved.training.learning_rate == 0.0003 and saved.training.max_steps == 77
    assert note.isHidden()


def test_a_spin_box_being_typed_in_keeps_its_text_without_a_note(make_page, qtbot) -> None:
    page = make_page()
    path = page.context.project.config_path
    rank = page.form.findChild(QSpinBox, "field_method_rank")
    page.show()
    page.activateWindow()
    rank.setFocus()  # a spin box takes its value as it is typed unless it has the focus
    qtbot.waitUntil(rank.hasFocus, timeout=5000)
    rank.lineEdit().selectAll()
    qtbot.keyClicks(rank, "32")

    path.write_text(path.read_text() + "\n[training]\nmax_steps = 77\n")
    assert page.context.watcher.check()
    assert page.config.training.max_steps == 77
    assert rank.text() == "32"
    assert page.form.findChild(QLabel, "error_method_rank").isHidden()  # the file left the rank as it was
    qtbot.keyClick(rank, Qt.Key.Key_Return)
    saved = load_config(path)
    assert saved.method.rank == 32 and saved.training.max_steps == 77


def test_a_field_not_being_typed_in_shows_the_file(make_page, qtbot) -> None:
    page = make_page()
    path = page.context.project.config_path
    rate = page.form.findChild(QLineEdit, "field_training_learning_rate")
    rate.selectAll()
    qtbot.keyClicks(rate, "0.0003")
    qtbot.keyClick(rate, Qt.Key.Key_Return)  # taken and saved
    path.write_text(path.read_text().replace("learning_rate = 0.0003", "learning_rate = 0.0005"))
    assert page.context.watcher.check()
    assert rate.text() == "0.0005"
