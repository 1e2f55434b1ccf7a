"""Loss masks in the dataset check: a mask that cannot be read, a missing one and one of another shape than
its image are each named with their file and the fix, by `check-dataset` too, before any run starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dataset_files import MakeDataset, make_image
from PIL import Image

from studio.cli import main as cli_main
from studio.core.config.schema import ConceptSection
from studio.core.dataset.checks import check_concepts


def _masked(make_dataset: MakeDataset) -> tuple[Path, Path]:
    """Five 64x48 images; masks: a.png fine, b.png half size (fine), c.png not an image, d.png square, e none."""
    root = make_dataset({f"{name}.png": f"picture {name}" for name in "abcde"})
    masks = root.parent / "masks"
    masks.mkdir()
    Image.new("L", (64, 48), 255).save(masks / "a.png")
    Image.new("L", (32, 24), 255).save(masks / "b.png")
    (masks / "c.png").write_bytes(b"not a picture")
    Image.new("L", (48, 48), 255).save(masks / "d.png")
    return root, masks


def test_each_broken_mask_is_named_with_its_file_and_the_fix(make_dataset: MakeDataset) -> None:
    root, masks = _masked(make_dataset)
    report = check_concepts([ConceptSection(path=str(root))], None, 32, mask_folder=masks)
    found = {(p.code, Path(p.path).name): p for p in report.problems}
    assert set(found) == {("unreadable_mask", "c.png"), ("mask_wrong_size", "d.png"), ("missing_mask", "e.png")}
    unreadable = found["unreadable_mask", "c.png"]
    assert unreadable.severity == "error" and unreadable.path == str(masks / "c.png")
    assert str(unreadable).startswith(f"error: {masks / 'c.png'}: the mask of c.png cannot be read")
    assert "or delete it (the image then trains whole)" in unreadable.hint
    wrong = found["mask_wrong_size", "d.png"]
    assert wrong.severity == "error" and wrong.path == str(masks / "d.png")
    assert "the mask is 48x48 but its image d.png is 64x48" in wrong.message
    assert wrong.hint == "save the mask at 64x48, the size of d.png"
    missing = found["missing_mask", "e.png"]
    assert missing.severity == "warning" and missing.path == str(root / "e.png")
    assert f"has no mask in {masks} (looked for e.png); it trains whole" in missing.message
    assert str(masks / "e.png") in missing.hint


def test_a_mask_folder_that_does_not_exist_is_an_error(make_dataset: MakeDataset, tmp_path: Path) -> None:
    root = make_dataset({"a.png": "a"})
    report = check_concepts([ConceptSection(path=str(root))], None, 32, mask_folder=tmp_path / "nope")
    assert [(p.code, p.path) for p in report.errors] == [("mask_folder_missing", str(tmp_path / "nope"))]
    assert "dataset.mask_folder" in report.errors[0].message


def test_check_dataset_names_the_broken_masks(make_dataset: MakeDataset,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    root, masks = _masked(make_dataset)
    assert cli_main(["check-dataset", str(root), "--resolution", "32", "--mask-folder", str(masks)]) == 1
    text = capsys.readouterr().out
    assert f"error: {masks / 'c.png'}: the mask of c.png cannot be read" in text
    assert f"error: {masks / 'd.png'}: the mask is 48x48 but its image d.png is 64x48" in text
    assert f"warning: {root / 'e.png'}: has no mask in {masks}" in text
    assert text.strip().endswith("5 images: 2 errors, 1 warnings")
    assert cli_main(["check-dataset", str(root), "--resolution", "32"]) == 0  # no masks asked for: none checked
    capsys.readouterr()


def test_check_dataset_checks_a_projects_mask_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studio.core.project.folder import create_project, default_config

    config = default_config("pics")
    config.dataset.masks, config.dataset.mask_folder = "folder", "masks"
    project = create_project(tmp_path / "proj", config)
    make_image(project.root / "pics" / "a.png", size=(64, 64))
    (project.root / "masks").mkdir()
    (project.root / "masks" / "a.png").write_bytes(b"")
    assert cli_main(["check-dataset", str(project.root), "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert {"code": "unreadable_mask", "severity": "error", "path": str(project.root / "masks" / "a.png")} in [
        {k: p[k] for k in ("code", "severity", "path")} for p in problems]
