"""A seed the schema takes (any 32-bit number) shows on the Model page and is kept: a spin box holds at most
2147483647, and a project whose studio.toml said seed = 3000000000 raised as its page opened."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLineEdit

from studio.core.config.files.toml_file import load_config, save_config
from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings


def test_a_seed_over_two_billion_is_shown_typed_and_kept(qtbot, tmp_path: Path) -> None:
    project = create_project(tmp_path / "project")
    config = load_config(project.config_path)
    config.training.seed = 3_000_000_000
    save_config(config, project.config_path)
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(project)
    page = ModelPage(context)
    qtbot.addWidget(page)
    assert context.config is not None and context.config.training.seed == 3_000_000_000
    seed = page.form.findChild(QLineEdit, "field_training_seed")
    assert seed is not None and seed.text() == "3000000000"
    seed.setText("4294967295")
    seed.editingFinished.emit()
    assert load_config(project.config_path).training.seed == 2**32 - 1
    assert page.form.findChild(QLineEdit, "field_sampling_seed").text() == "1234"
