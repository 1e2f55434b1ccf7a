"""A preset made for one size of a family (FLUX.2 [klein] 9B) is estimated, and trained, at that size."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QPushButton, QWidget

from studio.core.config.files.presets import apply_preset, get_preset
from studio.core.config.files.toml_file import load_config
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram
from studio.core.estimate.plans.fixes import apply_changes
from studio.core.estimate.plans.preset_estimate import estimate_preset
from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings
from tests.gui.conftest import shut_down

BASE_4B, BASE_9B = "black-forest-labs/FLUX.2-klein-base-4B", "black-forest-labs/FLUX.2-klein-base-9B"
PRESET_9B = "flux2-klein-9b-lora-40gb"


@pytest.fixture
def klein_page(qtbot, tmp_path: Path) -> ModelPage:
    root = tmp_path / "project"
    (root / "images").mkdir(parents=True)
    config = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": BASE_4B},
                                         "dataset": {"concepts": [{"path": "images"}]}})
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(root, config))
    page = ModelPage(context)
    qtbot.addWidget(page, before_close_func=shut_down)
    qtbot.waitUntil(lambda: page.gpu is not None and page.estimate.estimate is not None, timeout=10000)
    page.update_estimates()
    return page


def test_the_9b_card_on_a_4b_project_shows_the_9b_estimate(klein_page: ModelPage) -> None:
    page = klein_page
    card = page.findChild(QWidget, f"preset_card_{PRESET_9B}")
    project = page.context.resolved_config(page.config)
    on_9b = estimate_preset(get_preset(PRESET_9B), page.gpu, apply_changes(project, {"model.base": BASE_9B}))
    assert card.findChild(QLabel, "preset_estimate").text() == (
        f"promises 40 GB · estimated {on_9b.estimate.total_gb:.1f} GB with samples")
    assert on_9b.estimate.total_gb > 20  # the 9B's weights: not the 4B's 11 GB
    assert card.findChild(QLabel, "batch_badge").text() == "batch 1 fits"


@pytest.mark.parametrize(("answer", "base"), [(QMessageBox.StandardButton.Yes, BASE_9B),
                                              (QMessageBox.StandardButton.No, BASE_4B)])
def test_using_the_9b_preset_asks_and_switches_the_base(klein_page: ModelPage, qtbot, monkeypatch,
                                                          answer: QMessageBox.StandardButton, base: str) -> None:
    page = klein_page
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, title, text, *a, **k: asked.append(text) or answer)
    messages: list[str] = []
    page.context.sig_status.connect(messages.append)
    qtbot.mouseClick(page.findChild(QPushButton, f"use_{PRESET_9B}"), Qt.MouseButton.LeftButton)
    assert len(asked) == 1 and "made for the FLUX.2 [klein] 9B" in asked[0] and BASE_4B in asked[0]
    saved = load_config(page.context.project.config_path)
    assert (saved.model.base, saved.method.rank) == (base, 16)  # the preset's settings either way
    assert page.base.text() == base
    if base == BASE_9B:
        assert f"Base model changed from {BASE_4B} to {BASE_9B}" in messages[-1]
    else:
        assert "on the 4B base" in messages[-1]


def test_cancel_leaves_the_project_and_a_preset_of_its_size_asks_nothing(klein_page: ModelPage,
                                                                          monkeypatch) -> None:
    page = klein_page
    before = page.context.project.config_path.read_text()
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Cancel)
    page.choose_preset(get_preset(PRESET_9B))
    assert page.context.project.config_path.read_text() == before and page.config.model.base == BASE_4B
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: pytest.fail("asked"))
    page.choose_preset(get_preset("flux2-klein-4b-lora-24gb"))
    assert load_config(page.context.project.config_path).model.base == BASE_4B


def test_the_new_project_wizard_estimates_the_9b_preset_on_the_9b_and_asks(qtbot, tmp_path: Path,
                                                                           monkeypatch) -> None:
    from PySide6.QtWidgets import QWizard

    from studio.gui.project.wizard import NewProjectWizard

    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    wizard = NewProjectWizard(context)
    qtbot.addWidget(wizard)
    wizard.show()
    wizard.images_page.folder.setText(str(tmp_path / "klein project"))
    wizard.next()
    wizard.model_page.choose(BASE_4B, "flux2-klein")
    wizard.next()
    presets = wizard.preset_page.list
    row = next(i for i in range(presets.count()) if presets.item(i).data(Qt.ItemDataRole.UserRole).id == PRESET_9B)
    project_9b = apply_changes(wizard.resolved_base_config(), {"model.base": BASE_9B})
    on_9b = estimate_vram(project_9b.varied(apply_preset(project_9b, get_preset(PRESET_9B))), wizard.gpu)
    assert on_9b.total_gb > 20 and presets.item(row).text().endswith(f"(about {on_9b.total_mb / 1024:.1f} GB)")
    presets.setCurrentRow(row)
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda _parent, _title, text, *a, **k: asked.append(text) or QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(wizard.accepted, timeout=5000):
        wizard.button(QWizard.WizardButton.FinishButton).click()
    assert len(asked) == 1 and "made for the FLUX.2 [klein] 9B" in asked[0]
    assert wizard.project.load_config().model.base == BASE_9B


def test_a_preset_of_another_family_brings_its_base_in_place_of_the_default(qtbot, tmp_path: Path,
                                                                             monkeypatch) -> None:
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(tmp_path / "project"))  # SD 1.5, its default base
    page = ModelPage(context)
    qtbot.addWidget(page, before_close_func=shut_down)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: pytest.fail("asked"))
    messages: list[str] = []
    context.sig_status.connect(messages.append)
    page.choose_preset(get_preset(PRESET_9B))
    saved = load_config(context.project.config_path)
    assert (saved.model.family, saved.model.base) == ("flux2-klein", BASE_9B)
    assert f"Base model: {BASE_9B}" in messages[-1]
    assert page.findChild(QLabel, "model_base_status").text().startswith("Hub id " + BASE_9B)
