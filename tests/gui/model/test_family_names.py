"""The family combos show each family's name from its declaration and store its id in studio.toml."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QComboBox

from studio.core.config.files.toml_file import load_config
from studio.core.families import FAMILIES
from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings
from tests.gui.conftest import shut_down


def test_the_family_combos_show_names_and_keep_ids(qtbot, tmp_path: Path) -> None:
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(tmp_path / "project"))
    page = ModelPage(context)
    qtbot.addWidget(page, before_close_func=shut_down)
    combo = page.findChild(QComboBox, "model_family")
    shown = [combo.itemText(i) for i in range(combo.count())]
    assert shown == [spec.title for spec in FAMILIES]
    assert "FLUX.2 [klein]" in shown and "flux2-klein" not in shown and combo.currentText() == "SD 1.x/2.x"
    filters = page.findChild(QComboBox, "preset_family")
    assert [filters.itemText(i) for i in range(filters.count())] == ["all", *(spec.title for spec in FAMILIES)]
    methods = page.findChild(QComboBox, "preset_method")
    assert [methods.itemText(i) for i in range(methods.count())] == ["all", "LoRA", "DreamBooth"]

    combo.setCurrentIndex(combo.findText("FLUX.2 [klein]"))
    combo.activated.emit(combo.currentIndex())
    assert load_config(context.project.config_path).model.family == "flux2-klein"
    assert filters.currentText() == "FLUX.2 [klein]"
