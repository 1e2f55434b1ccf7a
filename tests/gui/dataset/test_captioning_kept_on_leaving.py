"""A model's captions not yet reviewed (an hour of captioning on a big dataset) are never dropped unasked:
opening another project or closing the window asks first, and Cancel keeps them."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from studio.core.project.folder import Project, create_project
from studio.gui.context import StudioContext
from studio.gui.dataset.page import DatasetPage
from studio.gui.shell.application import make_settings
from studio.gui.shell.main_window import MainWindow
from tests.gui.dataset.test_caption_review import _tags


def test_unreviewed_captions_are_asked_about_before_another_project_opens(qtbot, project: Project,  # type: ignore[no-untyped-def]
                                                                          tmp_path: Path, monkeypatch) -> None:
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb"))
    qtbot.addWidget(window)
    window.set_project(project)
    page = window.show_page("page_dataset")
    assert isinstance(page, DatasetPage) and page.wait_loaded(30)
    dialog = page.open_caption_dialog()
    assert dialog is not None
    for image in sorted(page.store.entries)[:3]:  # type: ignore[union-attr]
        dialog.add_proposal(_tags(image))
    asked: list[str] = []

    def answer(button: str):  # type: ignore[no-untyped-def]
        def exec_(box: QMessageBox) -> int:
            asked.append(box.text())
            next(b for b in box.buttons() if b.text().replace("&", "") == button).click()
            return 0
        return exec_

    other = create_project(tmp_path / "dogs")
    monkeypatch.setattr(QMessageBox, "exec", answer("Cancel"))
    assert not window.open_project_path(other.root)
    assert "3 captions a model proposed, not yet accepted or rejected" in asked[0]
    assert window.context.project is not None and window.context.project.root == project.root
    assert page.tools.dialog is dialog and len(dialog.proposals) == 3  # Cancel: the proposals are there to review

    monkeypatch.setattr(QMessageBox, "exec", answer("Discard my edits"))
    assert window.open_project_path(other.root)
    assert window.context.project is not None and window.context.project.root == other.root
