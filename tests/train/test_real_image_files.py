"""Files from people's real image folders, through the dataset check, the grid's thumbnail and the trainer alike:
phone photos with odd EXIF blocks or a video after the picture, 16-bit grey scans, transparent cut-outs,
downloads cut short."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from studio.core.config.schema import ConceptSection, DatasetSection
from studio.core.dataset.checks import check_concepts
from studio.core.dataset.thumbnails import make_thumbnail

pytest.importorskip("torch")

from studio.caption.base import load_image as captioner_image
from studio.train.data.controls import fitted_control
from studio.train.data.items import TrainItem, load_image
from studio.train.data.masks import MaskSource
from tests.train.test_data import _collect


def _exif_rotated_with_gps_version(gps_type: int) -> bytes:
    """EXIF that says "turn 90 degrees clockwise", with a GPS version tag stored as `gps_type` (2: text, 3: short
    numbers) instead of 4 bytes, as some phones and editing apps write it; Pillow reads it but cannot write it back."""
    entries = struct.pack("<H", 2) + struct.pack("<HHII", 0x0112, 3, 1, 6) + struct.pack("<HHII", 0x8825, 4, 1, 38)
    gps = struct.pack("<H", 1) + struct.pack("<HHI", 0, gps_type, 1) + b"\x02\x02\x00\x00" + struct.pack("<I", 0)
    return b"Exif\x00\x00II*\x00" + struct.pack("<I", 8) + entries + struct.pack("<I", 0) + gps


@pytest.mark.parametrize("gps_type", [2, 3])
def test_a_photo_whose_exif_block_pillow_cannot_rewrite_trains_upright(tmp_path: Path, gps_type: int) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    pixels = np.zeros((32, 64, 3), dtype=np.uint8)
    pixels[:, :32] = 255  # left half white as stored: on top once turned
    path = folder / "phone.jpg"
    Image.fromarray(pixels).save(path, exif=_exif_rotated_with_gps_version(gps_type), quality=95)
    (folder / "phone.txt").write_text("a photo", encoding="utf-8")

    items, _ = _collect(folder)
    assert [(item.path, item.size) for item in items] == [(path, (32, 64))]
    item = TrainItem(0, path, "a photo", 1, (32, 64), (32, 64))
    loaded = load_image(item, "center", False, None)  # stopped the run here (TypeError / "cannot be read")
    assert loaded.pixels.shape == (3, 64, 32)
    assert loaded.pixels[:, :16].mean() > 0.9 and loaded.pixels[:, -16:].mean() < -0.9
    control = np.asarray(fitted_control(path, (32, 64)))  # as an edit pair's control
    assert control[:16].mean() > 230 and control[-16:].mean() < 25
    thumbnail = make_thumbnail(path, tmp_path / "thumbs")  # was shown as unreadable in the grid
    assert thumbnail is not None and thumbnail[:2] == (32, 64)
    assert captioner_image(path).size == (32, 64)
    masks = MaskSource(DatasetSection(masks="folder", mask_folder=str(folder)))  # the same file as a loss mask
    mask = masks.open(tmp_path / "phone.png", Image.new("RGB", (32, 64)))
    assert mask is not None and np.asarray(mask)[:16].mean() > 230 and np.asarray(mask)[-16:].mean() < 25


def test_a_16_bit_grey_scan_trains_and_shows_as_its_greys_not_white(tmp_path: Path) -> None:
    path = tmp_path / "scan.png"
    grey = np.full((64, 64), 16384, dtype=np.uint16)  # a quarter of 65535: dark grey
    grey[:, 32:] = 49151  # three quarters: light grey
    Image.fromarray(grey).save(path)
    with Image.open(path) as stored:
        assert stored.mode == "I;16"

    loaded = load_image(TrainItem(0, path, "", 1, (64, 64), (64, 64)), "center", False, None)
    assert loaded.pixels[:, :, :24].mean() == pytest.approx(-0.5, abs=0.02)
    assert loaded.pixels[:, :, 40:].mean() == pytest.approx(0.5, abs=0.02)
    thumbnail = make_thumbnail(path, tmp_path / "thumbs")
    assert thumbnail is not None
    shown = np.frombuffer(thumbnail[2], dtype=np.uint8).reshape(64, 64, 3)
    assert abs(int(shown[:, :24].mean()) - 64) <= 3 and abs(int(shown[:, 40:].mean()) - 191) <= 3


def test_transparent_parts_train_on_white_as_the_captioner_saw_them(tmp_path: Path) -> None:
    path = tmp_path / "cutout.png"
    rgba = np.zeros((64, 64, 4), dtype=np.uint8)  # transparent black, as most editors store a removed background
    rgba[16:48, 16:48] = (200, 0, 0, 255)  # an opaque red subject
    Image.fromarray(rgba).save(path)

    assert captioner_image(path).getpixel((0, 0)) == (255, 255, 255)  # the captioner describes a white background
    loaded = load_image(TrainItem(0, path, "", 1, (64, 64), (64, 64)), "center", False, None)
    assert loaded.pixels[:, :8, :8].min() > 0.99  # trained on black before
    assert loaded.pixels[0, 24:40, 24:40].mean() > 0.5 and loaded.pixels[1, 24:40, 24:40].mean() < -0.9
    assert np.asarray(fitted_control(path, (64, 64)))[0, 0].tolist() == [255, 255, 255]
    thumbnail = make_thumbnail(path, tmp_path / "thumbs")
    assert thumbnail is not None and thumbnail[2][:3] == b"\xff\xff\xff"


def test_a_cut_off_download_is_skipped_before_the_run_and_a_motion_photo_trains(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    Image.effect_noise((96, 64), 60).convert("RGB").save(folder / "whole.jpg", quality=90)
    data = (folder / "whole.jpg").read_bytes()
    (folder / "cut.jpg").write_bytes(data[: len(data) * 2 // 3])  # a download that stopped
    # A phone's motion photo: the picture, then a short video after the JPEG's end marker.
    (folder / "motion.jpg").write_bytes(data + b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 20)
    for name in ("whole", "cut", "motion"):
        (folder / f"{name}.txt").write_text("noise", encoding="utf-8")

    items, warnings = _collect(folder)
    assert sorted(item.path.name for item in items) == ["motion.jpg", "whole.jpg"]  # cut.jpg stopped the run later
    skipped = {Path(path).name: message for message, path in warnings if message.startswith("skipped")}
    assert list(skipped) == ["cut.jpg"] and "cut off" in skipped["cut.jpg"]
    for item in items:
        load_image(item, "center", False, None)

    report = check_concepts([ConceptSection(path=str(folder))], None, 64)
    assert {Path(p.path).name: p.code for p in report.errors} == {"cut.jpg": "truncated_image"}
    assert not [p for p in report.problems if Path(p.path).name == "motion.jpg"]  # was "the file is cut off"


def test_a_png_turned_by_exif_after_its_pixels_is_bucketed_as_the_check_sizes_it(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    exif = Image.Exif()
    exif[0x0112] = 6
    path = folder / "late.png"
    Image.new("RGB", (96, 32)).save(path, exif=exif)
    data, chunks, at = path.read_bytes(), [], 8
    while at < len(data):
        end = at + 12 + int.from_bytes(data[at:at + 4], "big")
        chunks.append(data[at:end])
        at = end
    ordered = [c for c in chunks if c[4:8] != b"eXIf"]
    ordered[-1:-1] = [c for c in chunks if c[4:8] == b"eXIf"]  # the EXIF after the pixels, before the end
    path.write_bytes(data[:8] + b"".join(ordered))
    (folder / "late.txt").write_text("x", encoding="utf-8")

    items, _ = _collect(folder)
    report = check_concepts([ConceptSection(path=str(folder))], None, 64)
    assert items[0].size == report.sizes[path] == (32, 96)
    assert load_image(items[0], "center", False, None).original_size == (96, 32)  # (height, width)
