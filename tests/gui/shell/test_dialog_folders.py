"""File dialogs open in the project's folder (or beside it, for another project), not in whatever folder the
studio was started from."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog, QPushButton

from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.shell.application import make_settings
from studio.gui.shell.main_window import MainWindow


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(title, folder) of every file dialog opened; each is cancelled."""
    seen: list[tuple[str, str]] = []

    def folder_dialog(_parent: object, title: str, start: str = "", *_a: object) -> str:
        seen.append((title, start))
        return ""

    def file_dialog(_parent: object, title: str, start: str = "", *_a: object) -> tuple[str, str]:
        seen.append((title, start))
        return "", ""

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", folder_dialog)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", file_dialog)
    return seen


def test_the_windows_dialogs_open_in_the_project(qtbot, tmp_path: Path, opened: list[tuple[str, str]]) -> None:
    project = create_project(tmp_path / "projects" / "cats")
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb"))
    qtbot.addWidget(window)
    window.set_project(project)
    root = str(project.root)

    window.open_project_dialog()
    assert opened[-1] == ("Open project folder", str(project.root.parent))

    dataset = window.show_page("page_dataset")
    dataset.concepts_panel.add_button.click()  # type: ignore[attr-defined]
    assert opened[-1] == ("Add a folder of training images", root)

    model = window.show_page("page_model")
    for button in model.findChildren(QPushButton):
        if button.text() in ("Folder…", "File…") and button.parent() is model.findChild(object, "model_picker"):
            button.click()
    assert opened[-2:] == [("Choose a diffusers model folder", root), ("Choose a model file", root)]

    runs = window.show_page("page_runs")
    runs._pick_import()  # type: ignore[attr-defined]  # Import run…: a .zip, else a folder
    assert opened[-2:] == [("Import a run (.zip) copied back from another machine", root),
                           ("Or import a run folder", root)]


def test_a_concepts_folder_buttons_open_at_its_folder_in_the_project(qtbot, tmp_path: Path,
                                                                    opened: list[tuple[str, str]]) -> None:
    """studio.toml's concept paths are relative to the project: the dialog opens at the concept's folder there (the
    class images' folder, empty, at the project), not in the folder the studio was started from."""
    from studio.core.project.folder import default_config

    project = create_project(tmp_path / "projects" / "cats", default_config("photos/tabby"))
    (project.root / "photos" / "tabby").mkdir(parents=True)
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb"))
    qtbot.addWidget(window)
    window.set_project(project)
    dataset = window.show_page("page_dataset")
    assert dataset.wait_loaded(30)  # type: ignore[attr-defined]
    details = dataset.concepts_panel.details  # type: ignore[attr-defined]
    dataset.concepts_panel.table.setCurrentCell(0, 0)  # type: ignore[attr-defined]
    assert details.path.text() == "photos/tabby"
    buttons = [b for b in details.findChildren(QPushButton) if b.text() == "Folder…"]
    for button in buttons:
        button.click()
    assert opened[-2:] == [("Choose a folder", str(project.root / "photos" / "tabby")),
                           ("Choose a folder", str(project.root))]


def test_the_new_projects_folder_dialog_opens_beside_the_open_project(qtbot, tmp_path: Path,
                                                                     opened: list[tuple[str, str]]) -> None:
    project = create_project(tmp_path / "projects" / "cats")
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb"))
    qtbot.addWidget(window)
    window.set_project(project)
    wizard = window.new_project_wizard()
    qtbot.addWidget(wizard)
    page = wizard.images_page  # type: ignore[attr-defined]
    page._browse_project()
    page.folder.setText(str(tmp_path / "projects" / "dogs"))  # typed, not made yet: the folder it goes in
    page._browse_project()
    assert opened == [("Where the project goes", str(project.root.parent))] * 2
