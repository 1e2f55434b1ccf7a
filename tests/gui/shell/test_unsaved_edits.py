"""Edits here that are not in studio.toml (the TOML being edited) are never dropped unasked: opening another
project or closing the window asks first, Cancel really keeps them, and the TOML window never writes one
project's text over another's."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox, QPlainTextEdit, QPushButton

from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.model.toml_dialog import TomlDialog
from studio.gui.shell.application import make_settings
from studio.gui.shell.main_window import MainWindow


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    win = MainWindow(context)
    qtbot.addWidget(win)
    win.set_project(create_project(tmp_path / "cats"))
    return win


def answer_with(monkeypatch, button: str) -> list[str]:
    """Every message box the window opens is answered by clicking `button`; their texts are returned."""
    asked: list[str] = []

    def exec_(box: QMessageBox) -> int:
        asked.append(box.text())
        next(b for b in box.buttons() if b.text().replace("&", "") == button).click()
        return 0

    monkeypatch.setattr(QMessageBox, "exec", exec_)
    return asked


def edit_toml(window: MainWindow) -> tuple[TomlDialog, QPlainTextEdit]:
    page = window.page("page_model")
    assert isinstance(page, ModelPage)
    dialog = page.show_toml()
    assert isinstance(dialog, TomlDialog)
    view = dialog.findChild(QPlainTextEdit, "toml_view")
    view.setPlainText(view.toPlainText().replace("[model]", "# my notes on the cats\n[model]"))
    return dialog, view


def test_opening_another_project_asks_and_cancel_keeps_the_toml_being_edited(window: MainWindow, tmp_path: Path,
                                                                               monkeypatch) -> None:
    dogs = create_project(tmp_path / "dogs")
    dogs_text = dogs.config_path.read_text()
    dialog, view = edit_toml(window)
    asked = answer_with(monkeypatch, "Cancel")
    monkeypatch.setattr(QMessageBox, "warning", lambda *_a: None)
    assert not window.open_project_path(tmp_path / "gone")  # nothing to open: nothing to ask about the edits
    assert asked == []
    assert not window.open_project_path(dogs.root)
    assert "the TOML being edited" in asked[0] and "Open another project" in asked[0]
    assert window.context.project is not None and window.context.project.root.name == "cats"
    assert "# my notes on the cats" in view.toPlainText()

    asked = answer_with(monkeypatch, "Discard my edits")
    assert window.open_project_path(dogs.root)
    assert window.context.project.root.name == "dogs"
    # The TOML window shows the dogs' file: Apply has nothing of the cats' to write over it.
    assert view.toPlainText() == dogs_text
    dialog.findChild(QPushButton, "toml_apply").click()
    assert dogs.config_path.read_text() == dogs_text
    dialog.close()


def test_the_toml_window_follows_the_project_opened(window: MainWindow, tmp_path: Path) -> None:
    """Another project opened with no one asked (the context alone): Apply never writes the cats' text into
    the dogs' studio.toml."""
    dogs = create_project(tmp_path / "dogs")
    dogs_text = dogs.config_path.read_text()
    dialog, view = edit_toml(window)
    window.context.set_project(dogs)
    assert "# my notes on the cats" not in view.toPlainText()
    dialog.apply()
    assert dogs.config_path.read_text() == dogs_text
    dialog.close()


def test_closing_the_window_asks_about_the_toml_being_edited(window: MainWindow, monkeypatch) -> None:
    window.show()
    edit_toml(window)
    asked = answer_with(monkeypatch, "Cancel")
    assert not window.close()
    assert window.isVisible() and "Close the studio" in asked[0]
    asked = answer_with(monkeypatch, "Discard my edits")
    assert window.close()
    assert len(asked) == 1


def test_a_refused_sample_size_let_go_with_its_project_is_not_asked_about_again(window: MainWindow, tmp_path: Path,
                                                                              monkeypatch) -> None:
    from studio.gui.training.page import TrainPage

    train = window.page("page_train")
    assert isinstance(train, TrainPage)
    assert train.sampling.commit({"sampling.size": 100})  # not a multiple of 8: refused, shown under the settings
    asked = answer_with(monkeypatch, "Discard my edits")
    assert window.open_project_path(create_project(tmp_path / "dogs").root)
    assert "a refused sample setting" in asked[0]
    assert window.context.pending_edits() == []


def test_closing_the_toml_window_with_edits_not_applied_asks_first(window: MainWindow, monkeypatch) -> None:
    dialog, view = edit_toml(window)
    path = window.context.project.config_path  # type: ignore[union-attr]
    before = path.read_text()
    asked = answer_with(monkeypatch, "Cancel")
    dialog.findChild(QPushButton, "toml_close").click()
    assert dialog.isVisible() and "# my notes on the cats" in view.toPlainText()
    dialog.reject()  # Escape
    assert dialog.isVisible() and len(asked) == 2 and "Close and lose your edits?" in asked[0]
    asked = answer_with(monkeypatch, "Discard my edits")
    dialog.findChild(QPushButton, "toml_close").click()
    assert not dialog.isVisible() and path.read_text() == before
