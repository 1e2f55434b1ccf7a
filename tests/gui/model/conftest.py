"""The Model page on a fake machine, as the page tests build it."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings


@pytest.fixture
def make_page(qtbot, tmp_path: Path):
    def make(profile: str | None = "rtx4090-24gb") -> ModelPage:
        context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file=profile)
        context.set_project(create_project(tmp_path / "project"))
        page = ModelPage(context)
        qtbot.addWidget(page)
        page.hardware.wait()
        qtbot.waitUntil(lambda: page.hardware.report is not None, timeout=10000)
        qtbot.waitUntil(lambda: page.estimate.estimate is not None, timeout=5000)
        return page

    return make
