"""The base model's folder is read again when a model lands in it: the demo's tiny model built after the
page opened (the first start), or a person pressing "Look again" after copying one in."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton

from studio.core.config.schema import TrainConfig
from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings
from tests.gui.conftest import shut_down


@pytest.mark.parametrize("trigger", ["demo model built", "look again"])
def test_a_model_that_arrives_in_the_base_folder_is_shown_ready_and_sized(
        qtbot, tmp_path: Path, config: TrainConfig, tiny_sd15: Path, trigger: str) -> None:
    root = tmp_path / "project"
    (root / "data" / "shapes").mkdir(parents=True)
    folder = root / "models" / "tiny-sd15"
    folder.mkdir(parents=True)  # the builder has made the folder, not the model yet
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(root, config))
    page = ModelPage(context)
    qtbot.addWidget(page, before_close_func=shut_down)
    qtbot.waitUntil(lambda: page.gpu is not None and page.estimate.estimate is not None, timeout=10000)
    status = page.findChild(QLabel, "model_base_status")
    total = page.findChild(QLabel, "estimate_total")
    assert status.text().startswith(f"✗ {folder} has no model_index.json")
    before = total.text()

    shutil.copytree(tiny_sd15, folder, dirs_exist_ok=True)
    if trigger == "demo model built":
        context.sig_demo_model_built.emit(True)
    else:
        qtbot.mouseClick(page.findChild(QPushButton, "model_library_rescan"), Qt.MouseButton.LeftButton)

    qtbot.waitUntil(lambda: status.text().startswith("✓"), timeout=3000)
    assert str(folder) in status.text()
    qtbot.waitUntil(lambda: total.text() != before, timeout=3000)
    assert re.search(r"Estimated peak: \d{2,3}&nbsp;MB", total.text()), total.text()  # not "0.3 GB"
