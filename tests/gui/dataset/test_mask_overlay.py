"""The Dataset page's preview tints what a loss mask leaves out."""

from __future__ import annotations

import os
from pathlib import Path

from PIL import Image
from PySide6.QtGui import QColor, QPixmap

from studio.core.config.schema import DatasetSection, ModelSection, TrainConfig
from studio.gui.dataset.editor.mask_overlay import mask_image, with_mask


def _config(**dataset: object) -> TrainConfig:
    return TrainConfig(model=ModelSection(family="sd15", base="x"), dataset=DatasetSection(**dataset))  # type: ignore[arg-type]


def _colours(pixmap: QPixmap) -> tuple[QColor, QColor]:
    image = pixmap.toImage()
    return image.pixelColor(5, 20), image.pixelColor(35, 20)  # left half, right half


def test_the_alpha_channel_tints_the_transparent_half(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    picture = Image.new("RGBA", (40, 40), (255, 255, 255, 255))
    picture.paste((255, 255, 255, 0), (0, 0, 20, 40))
    picture.save(tmp_path / "a.png")
    base = QPixmap(40, 40)
    base.fill(QColor(255, 255, 255))
    shown = with_mask(base, mask_image(_config(masks="alpha"), tmp_path / "a.png", tmp_path))
    left, right = _colours(shown)
    assert left.red() > 200 and left.green() < 160  # tinted red: left out of the loss
    assert (right.red(), right.green(), right.blue()) == (255, 255, 255)  # trains: as it is
    assert mask_image(_config(), tmp_path / "a.png", tmp_path) is None  # no masks: no tint


def test_a_mask_file_of_the_same_name_tints_its_black_part(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    Image.new("RGB", (40, 40), "white").save(tmp_path / "b.jpg")
    (tmp_path / "masks").mkdir()
    mask = Image.new("L", (80, 80), 255)  # another size: scaled to the picture
    mask.paste(0, (0, 0, 40, 80))
    mask.save(tmp_path / "masks" / "b.png")
    config = _config(masks="folder", mask_folder="masks")  # relative to the project
    base = QPixmap(40, 40)
    base.fill(QColor(255, 255, 255))
    left, right = _colours(with_mask(base, mask_image(config, tmp_path / "b.jpg", tmp_path)))
    assert left.green() < 160 and right.green() == 255
    assert mask_image(config, tmp_path / "other.jpg", tmp_path) is None  # no mask file: trains whole


def test_a_mask_with_an_uppercase_extension_is_shown_as_the_trainer_takes_it(  # type: ignore[no-untyped-def]
        qtbot, tmp_path: Path) -> None:
    from studio.core.dataset.mask_checks import mask_problems

    Image.new("RGB", (40, 40), "white").save(tmp_path / "c.jpg")
    (tmp_path / "masks").mkdir()
    mask = Image.new("L", (40, 40), 255)
    mask.paste(0, (0, 0, 20, 40))
    mask.save(tmp_path / "masks" / "c.PNG", "PNG")  # as a Windows tool names it
    assert mask_problems([(tmp_path / "c.jpg", (40, 40))], tmp_path / "masks") == []  # the trainer uses it
    config = _config(masks="folder", mask_folder="masks")
    base = QPixmap(40, 40)
    base.fill(QColor(255, 255, 255))
    left, right = _colours(with_mask(base, mask_image(config, tmp_path / "c.jpg", tmp_path)))
    assert left.green() < 160 and right.green() == 255
    (tmp_path / "masks" / "c.PNG").rename(tmp_path / "masks" / "c-old.PNG")  # the folder changed: read again
    later = (tmp_path / "masks").stat().st_mtime_ns + 1_000_000_000  # as a person renames it, not in the same tick
    os.utime(tmp_path / "masks", ns=(later, later))
    assert mask_image(config, tmp_path / "c.jpg", tmp_path) is None
