"""TensorBoard and W&B are chosen on the Model page (output.log_to), not only in the TOML."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QCheckBox, QWidget

from studio.core.config.files.toml_file import load_config
from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings
from tests.gui.conftest import shut_down


def test_ticking_tensorboard_writes_log_to_into_the_projects_toml(qtbot, tmp_path: Path) -> None:
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(tmp_path / "project"))
    page = ModelPage(context)
    qtbot.addWidget(page, before_close_func=shut_down)
    logging = page.form.findChild(QWidget, "field_output_log_to")
    assert logging is not None and logging.isVisibleTo(page)  # a key setting: no need to show the advanced ones
    assert "sd-training-studio[logging]" in logging.toolTip()
    tensorboard = page.form.findChild(QCheckBox, "field_output_log_to_tensorboard")
    wandb = page.form.findChild(QCheckBox, "field_output_log_to_wandb")
    assert (tensorboard.text(), wandb.text()) == ("TensorBoard", "Weights & Biases")
    assert not tensorboard.isChecked() and not wandb.isChecked()

    tensorboard.click()
    assert load_config(context.project.config_path).output.log_to == ["tensorboard"]
    assert 'log_to = ["tensorboard"]' in context.project.config_path.read_text()
    wandb.click()
    tensorboard.click()
    assert load_config(context.project.config_path).output.log_to == ["wandb"]

    # studio.toml changed by hand: the boxes show what the file says.
    config = load_config(context.project.config_path)
    config.output.log_to = ["tensorboard", "wandb"]
    context.set_config(config)
    assert tensorboard.isChecked() and wandb.isChecked()
