"""The control image an edit run's samples edit is chosen on the Model page (sampling.control_image)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtWidgets import QLineEdit

from studio.core.config.files.toml_file import load_config
from studio.core.config.schema import TrainConfig
from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings
from tests.gui.conftest import shut_down


def test_the_sample_control_image_is_a_field_with_its_tooltip_that_reaches_the_toml(qtbot, tmp_path: Path) -> None:
    pairs = tmp_path / "project" / "pairs"
    (pairs / "control").mkdir(parents=True)
    for folder in (pairs, pairs / "control"):
        Image.new("RGB", (64, 64), (10, 20, 30)).save(folder / "cat.png")
    config = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": "models/klein"},
                                         "dataset": {"kind": "edit", "concepts": [{"path": "pairs"}]}})
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    project = create_project(tmp_path / "project", config)
    context.set_project(project)
    page = ModelPage(context)
    qtbot.addWidget(page, before_close_func=shut_down)
    field = page.form.findChild(QLineEdit, "field_sampling_control_image")
    assert field is not None and "control (reference) image every sample prompt edits" in field.toolTip()
    field.setText("held-out/before.png")
    field.editingFinished.emit()
    qtbot.waitUntil(lambda: load_config(project.config_path).sampling.control_image == "held-out/before.png")
