"""Image folders as people lay them out, recognised from listings alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dataset_files import make_image

from studio.core.config.schema import ConceptSection
from studio.core.dataset.layouts import DatasetError, detect_layout
from studio.core.dataset.scan import scan_concept


def _images(folder: Path, count: int, prefix: str = "img") -> None:
    for i in range(count):
        make_image(folder / f"{prefix} {i}.png")


def test_images_directly_in_the_folder(tmp_path: Path) -> None:
    _images(tmp_path / "photos", 3)
    layout = detect_layout(tmp_path / "photos")
    assert (layout.kind, [(c.folder, c.images, c.repeats) for c in layout.concepts]) == (
        "flat", [(tmp_path / "photos", 3, 1)])
    assert layout.describe() == "images in the folder: 1 concept, 3 images"


def test_kohya_folders_with_spaces_and_accents_are_concepts_with_their_repeats(tmp_path: Path) -> None:
    root = tmp_path / "mes données"
    _images(root / "10_chat été", 4)
    _images(root / "3_style", 2)
    (root / "notes").mkdir(parents=True)  # a folder without images is no concept
    layout = detect_layout(root)
    assert layout.kind == "kohya"
    assert [(c.folder.name, c.images, c.repeats) for c in layout.concepts] == [("3_style", 2, 3), ("10_chat été", 4, 10)]
    assert layout.images == 6
    assert layout.describe() == "kohya N_name folders: 2 concepts, 6 images (3_style: 2 ×3, 10_chat été: 4 ×10)"


def test_plain_subfolders_are_one_concept_each(tmp_path: Path) -> None:
    _images(tmp_path / "set" / "cats", 2)
    _images(tmp_path / "set" / "dogs" / "deep", 1)
    layout = detect_layout(tmp_path / "set")
    assert layout.kind == "nested"
    assert [(c.folder.name, c.images, c.repeats) for c in layout.concepts] == [("cats", 2, 1), ("dogs", 1, 1)]


def test_metadata_jsonl_makes_the_folder_one_concept(tmp_path: Path) -> None:
    root = tmp_path / "imagefolder"
    _images(root / "train", 2)
    (root / "metadata.jsonl").write_text(json.dumps({"file_name": "train/img 0.png", "text": "a cat"}) + "\n")
    layout = detect_layout(root)
    assert (layout.kind, layout.images, layout.concepts[0].folder) == ("metadata", 2, root)


def test_a_folder_without_images_is_empty_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    layout = detect_layout(tmp_path / "empty")
    assert (layout.kind, layout.concepts) == ("empty", ())
    assert layout.describe().startswith(f"No images in {tmp_path / 'empty'} yet")
    with pytest.raises(DatasetError, match=r"Cannot read the image folder .*gone.*Check that it exists"):
        detect_layout(tmp_path / "gone")


def test_a_run_folder_inside_an_image_folder_is_not_training_data(tmp_path: Path) -> None:
    """A project kept in its image folder must not train on its own samples."""
    _images(tmp_path, 2)
    run = tmp_path / "runs" / "20250101-120000-run"
    make_image(run / "samples" / "step-10.png")
    (run / "events.jsonl").write_text("")
    make_image(tmp_path / "runs" / "not a run" / "kept.png")
    assert detect_layout(tmp_path).images == 3
    names = [e.path.name for e in scan_concept(ConceptSection(path=str(tmp_path)))]
    assert names == ["img 0.png", "img 1.png", "kept.png"]


def test_a_nas_thumbnail_folder_is_not_training_data(tmp_path: Path) -> None:
    """A Synology NAS keeps its own thumbnails of each picture in @eaDir/; a Mac's zip holds __MACOSX/."""
    _images(tmp_path / "photos", 2)
    for size in ("XL", "M", "S"):
        make_image(tmp_path / "photos" / "@eaDir" / "img 0.png" / f"SYNOPHOTO_THUMB_{size}.jpg")
    make_image(tmp_path / "photos" / "__MACOSX" / "img 0.png")
    assert detect_layout(tmp_path / "photos").images == 2
    assert [e.path.name for e in scan_concept(ConceptSection(path=str(tmp_path / "photos")))] == ["img 0.png", "img 1.png"]
    _images(tmp_path / "nested" / "cats", 2)
    make_image(tmp_path / "nested" / "@eaDir" / "cats" / "SYNOPHOTO_THUMB_XL.jpg")
    layout = detect_layout(tmp_path / "nested")
    assert [(c.folder.name, c.images) for c in layout.concepts] == [("cats", 2)]
