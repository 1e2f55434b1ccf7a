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
