"""Choosing another family on the Model page with a base model of the old family: the page asks which base
to train, instead of keeping an SDXL folder under Z-Image until Train fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox, QLabel, QMessageBox

from studio.core.config.files.toml_file import load_config
from studio.core.models.known import default_base
from studio.core.models.library import LibraryModel
from studio.gui.model.page import ModelPage


def _sdxl_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "my-sdxl-merge"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionXLPipeline"}))
    return folder


def _pick_family(page: ModelPage, family: str) -> None:
    combo = page.findChild(QComboBox, "model_family")
    combo.setCurrentIndex(combo.findData(family))
    combo.activated.emit(combo.currentIndex())


@pytest.fixture
def sdxl_page(make_page, tmp_path: Path) -> tuple[ModelPage, Path]:
    page = make_page()
    folder = _sdxl_folder(tmp_path)
    page.choose_base(str(folder))
    assert page.config.model.family == "sdxl"
    return page, folder


def test_switching_to_z_image_offers_its_default_base_in_place_of_an_sdxl_folder(
        sdxl_page: tuple[ModelPage, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    page, folder = sdxl_page
    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, title, text, *a, **k:
                        asked.append((title, text)) or QMessageBox.StandardButton.Yes)
    _pick_family(page, "zimage")
    title, text = asked[0]
    assert title == "Train a Z-Image model?"
    assert f"{folder.name} is an SDXL model" in text and default_base("zimage") in text
    saved = load_config(page.context.project.config_path).model
    assert (saved.family, saved.base) == ("zimage", default_base("zimage"))
    assert page.findChild(QComboBox, "model_family").currentText() == "Z-Image"
    assert not page.findChild(QLabel, "model_base_status").text().startswith("✗")


def test_a_model_of_the_new_family_on_this_machine_is_offered_first(
        sdxl_page: tuple[ModelPage, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    page, _folder = sdxl_page
    mine = tmp_path / "z-image-finetune"
    page.library._scanned([LibraryModel(mine, "Added by you", 1, "zimage", "Z-Image model")])
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, _title, text, *a, **k:
                        asked.append(text) or QMessageBox.StandardButton.Yes)
    _pick_family(page, "zimage")
    assert str(mine) in asked[0]
    assert load_config(page.context.project.config_path).model.base == str(mine)


def test_keeping_the_base_shows_what_is_wrong_and_cancel_keeps_the_family(
        sdxl_page: tuple[ModelPage, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    page, folder = sdxl_page
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Cancel)
    _pick_family(page, "zimage")
    assert page.config.model.family == "sdxl"
    assert page.findChild(QComboBox, "model_family").currentText() == "SDXL"
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    _pick_family(page, "zimage")
    saved = load_config(page.context.project.config_path).model
    assert (saved.family, saved.base) == ("zimage", str(folder))
    status = page.findChild(QLabel, "model_base_status").text()
    assert status.startswith("✗") and "set the family to SDXL, or choose another model" in status


def test_a_default_base_follows_the_family_without_asking(make_page, monkeypatch: pytest.MonkeyPatch) -> None:
    page = make_page()
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: pytest.fail("asked"))
    _pick_family(page, "zimage")
    assert page.config.model.base == default_base("zimage")
