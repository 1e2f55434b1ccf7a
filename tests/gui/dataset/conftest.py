"""A project with a small generated dataset, and the Dataset page on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QSettings

from studio.core.project.folder import Project, create_project, default_config
from studio.gui.context import StudioContext
from studio.gui.dataset.page import DatasetPage
from tests.gui.conftest import shut_down

CAPTIONS = {"a.png": "red, square", "b.png": "blue, circle", "c.png": None, "d.png": "green, square"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("STUDIO_CACHE_DIR", str(tmp_path / "cache"))
    proj = create_project(tmp_path / "proj", default_config("images"))
    folder = proj.root / "images"
    folder.mkdir()
    for i, (name, caption) in enumerate(CAPTIONS.items()):
        Image.new("RGB", (96, 64), (i * 60, 100, 200 - i * 40)).save(folder / name)
        if caption is not None:
            (folder / name).with_suffix(".txt").write_text(caption, encoding="utf-8")
    return proj


def open_page(qtbot, project: Project, tmp_path: Path) -> DatasetPage:  # type: ignore[no-untyped-def]
    """The Dataset page shown on `project`, its folder read."""
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    context = StudioContext(settings)
    widget = DatasetPage(context)
    qtbot.addWidget(widget, before_close_func=shut_down)
    context.set_project(project)
    widget.resize(1200, 800)
    widget.show()
    assert widget.wait_loaded(30)
    return widget


@pytest.fixture
def page(qtbot, project: Project, tmp_path: Path) -> DatasetPage:  # type: ignore[no-untyped-def]
    return open_page(qtbot, project, tmp_path)


HELD_S = 5.0  # a held worker waits this long at most, then the test fails


def trigger_dialog_held(qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The bulk dialog on "Add trigger word" for all images, its count done, with the working out of the edits held
    once it starts: (dialog, working, release), two threading events."""
    import threading

    from studio.core.dataset.captions import caption_ops
    from studio.gui.dataset.edits.bulk import BulkDialog

    dialog = BulkDialog(page.tools.scopes(), page)
    dialog.select("trigger", scope="All images")
    qtbot.waitUntil(lambda: not dialog.counting(), timeout=5000)
    working, release = threading.Event(), threading.Event()
    add_trigger = caption_ops.add_trigger

    def held(captions, word):  # type: ignore[no-untyped-def]
        working.set()
        release.wait(HELD_S)
        return add_trigger(captions, word)

    monkeypatch.setattr(caption_ops, "add_trigger", held)
    return dialog, working, release
