"""The Train page's sample preview shows a sample whole, in its own shape, at any size of the page."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from pytestqt.qtbot import QtBot

from studio.core.runs.events import RunStarted, Sample
from studio.core.runs.run_model import RunModel
from studio.gui.training.samples import SamplesGallery


def test_a_portrait_sample_is_neither_cropped_nor_stretched(qtbot: QtBot, tmp_path: Path) -> None:
    Image.new("RGB", (768, 1024), (200, 30, 30)).save(tmp_path / "portrait.png")
    model = RunModel(tmp_path)
    model.apply(RunStarted(config={}, world_size=1, total_steps=10, devices=["cpu"]))
    model.apply(Sample(step=5, images=["portrait.png"], prompts=["a tall red thing"]))
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    gallery.resize(900, 500)
    gallery.show()
    gallery.refresh(model)
    preview = gallery.preview
    assert not preview.pixmap().isNull()
    for width, height in ((700, 200), (200, 700), (400, 400)):
        preview.resize(width, height)
        shown = preview.image_rect()
        assert abs(shown.width() / shown.height() - 0.75) < 0.01
        assert preview.rect().contains(shown)


def test_samples_of_the_demos_random_model_are_called_noise(qtbot: QtBot, tmp_path: Path) -> None:
    gallery = SamplesGallery()
    qtbot.addWidget(gallery)
    for base, noted in (("models/tiny-sd15", True), ("/home/me/demo-project/models/tiny-sd15", True),
                        ("runwayml/stable-diffusion-v1-5", False)):
        model = RunModel(tmp_path)
        model.apply(RunStarted(config={"model": {"family": "sd15", "base": base}}, world_size=1, total_steps=10,
                               devices=["cpu"]))
        gallery.refresh(model)
        assert gallery.random_model_note.isVisibleTo(gallery) is noted, base
    assert "noise" in gallery.random_model_note.text()
