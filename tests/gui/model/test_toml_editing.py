"""Show the TOML: edited text is checked first, problems are shown with their line, nothing is written
until it is valid; studio.toml changed by another program is read again, asking first about edits here."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QPushButton

from studio.core.config.files.toml_file import load_config
from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings


@pytest.fixture
def page(qtbot, tmp_path: Path) -> ModelPage:
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(tmp_path / "project"))
    page = ModelPage(context)
    qtbot.addWidget(page)
    return page


def test_toml_edits_are_validated_before_anything_is_written(page: ModelPage, qtbot) -> None:
    path = page.context.project.config_path  # type: ignore[union-attr]
    path.write_text("# my notes stay\n" + path.read_text())
    page.context.watcher.check()  # (the watcher would notice within a moment)
    dialog = page.show_toml()
    view = dialog.findChild(QPlainTextEdit, "toml_view")
    assert view.toPlainText().startswith("# my notes stay")
    assert not view.isReadOnly()
    before = path.read_text()

    view.setPlainText(before.replace("[model]", "[model]\nrank_typo = 3"))
    dialog.findChild(QPushButton, "toml_apply").click()
    problems = dialog.findChild(QLabel, "toml_problems").text()
    assert "Not saved" in problems and "rank_typo" in problems and "unknown key" in problems
    assert "line " in problems and view.extraSelections()  # the line at fault is marked
    assert path.read_text() == before

    view.setPlainText(before.replace("[model]", "[method]\nrank = 0\n\n[model]"))
    dialog.findChild(QPushButton, "toml_apply").click()
    assert "must be at least 1" in dialog.findChild(QLabel, "toml_problems").text()
    assert path.read_text() == before

    good = before.replace("[model]", "[method]\nrank = 32  # bigger\n\n[model]")
    view.setPlainText(good)
    dialog.findChild(QPushButton, "toml_apply").click()
    assert not dialog.findChild(QLabel, "toml_problems").text()
    assert path.read_text() == good  # written as typed, comments and all
    assert page.config.method.rank == 32 and page.form.value_shown("method.rank") == 32
    dialog.close()


def test_a_file_changed_on_disk_is_read_again(page: ModelPage, qtbot) -> None:
    path = page.context.project.config_path  # type: ignore[union-attr]
    path.write_text(path.read_text().replace("[model]", "[method]\nrank = 8\n\n[model]"))
    qtbot.waitUntil(lambda: page.config.method.rank == 8, timeout=5000)
    assert page.form.value_shown("method.rank") == 8
    # The studio's own saves are not mistaken for changes from elsewhere.
    assert page.apply_config_changes({"method.rank": 12})
    assert not page.context.watcher.check()


def test_edits_here_are_not_lost_without_asking(page: ModelPage, qtbot) -> None:
    path = page.context.project.config_path  # type: ignore[union-attr]
    asked: list[str] = []
    answer = {"reload": False}
    page.context.confirm_reload = lambda what: asked.append(what) or answer["reload"]
    page.form.show_advanced.setChecked(True)
    assert not page.apply_config_changes({"training.weight_decay": "lots"})  # a refused value, still typed there
    path.write_text(path.read_text().replace("[model]", "[method]\nrank = 8\n\n[model]"))
    assert page.context.watcher.check()
    assert asked == ["values refused in the settings form"]
    assert page.config.method.rank == 16  # kept
    path.write_text(path.read_text().replace("rank = 8", "rank = 9"))
    answer["reload"] = True
    assert page.context.watcher.check()
    assert page.config.method.rank == 9 and not page.form.has_invalid()
    assert load_config(path).method.rank == 9


def test_reading_the_file_again_replaces_the_text_being_edited(page: ModelPage, qtbot) -> None:
    """Seed edited in the editor (not applied), steps changed from a terminal, "Read the file again"
    chosen in the window's question: the editor shows the file, and Apply waits for a new edit."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from studio.gui.shell.main_window import MainWindow

    path = page.context.project.config_path  # type: ignore[union-attr]
    path.write_text(path.read_text() + "\n[training]\nmax_steps = 5\nseed = 1\n")
    page.context.watcher.check()
    page.context.confirm_reload = lambda what: MainWindow.confirm_reload(page, what)  # type: ignore[arg-type]
    dialog = page.show_toml()
    view = dialog.findChild(QPlainTextEdit, "toml_view")
    apply = dialog.findChild(QPushButton, "toml_apply")
    assert not apply.isEnabled()
    view.setPlainText(view.toPlainText().replace("seed = 1", "seed = 9"))
    assert apply.isEnabled()

    path.write_text(path.read_text().replace("max_steps = 5", "max_steps = 8"))  # from a terminal

    def answer() -> None:
        box = next(w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible())
        next(b for b in box.buttons() if b.text() == "Read the file again").click()

    QTimer.singleShot(50, answer)
    assert page.context.watcher.check()
    assert "max_steps = 8" in view.toPlainText() and "seed = 1" in view.toPlainText()
    assert not apply.isEnabled()
    assert page.config.training.max_steps == 8 and page.config.training.seed == 1
    apply.click()  # nothing to write: the outside edit stays
    assert "max_steps = 8" in path.read_text() and "seed = 1" in path.read_text()
    dialog.close()
