"""Datasets as a hostile machine leaves them: unreadable files and folders, images the trainer cannot
use, leftovers of killed saves. Each is named for what it is, and the check agrees with the trainer."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from dataset_files import MakeDataset, make_image, png_header_only

from studio.cli import main as cli_main
from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
from studio.core.dataset import scan as scan_module
from studio.core.dataset.checks import check_concepts
from studio.core.dataset.scan import DatasetError, scan_concept_report


def _check(root: Path):  # type: ignore[no-untyped-def]
    return check_concepts([ConceptSection(path=str(root))], None, 64)


def test_an_unreadable_caption_is_reported_as_unreadable_not_missing(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "a red square", "b.png": None})
    (root / "b.txt").mkdir()  # opening it fails, as a caption of another user's does
    (entry_a, entry_b) = scan_concept_report(ConceptSection(path=str(root))).entries
    assert entry_a.caption == "a red square" and entry_a.caption_error is None
    assert entry_b.caption is None and entry_b.caption_error and entry_b.caption_path == root / "b.txt"
    problems = _check(root).by_path()
    (problem,) = problems[str(root / "b.txt")]
    assert problem.severity == "error" and problem.code == "unreadable_caption"
    assert "cannot be read" in problem.message
    assert "missing_caption" not in [p.code for p in problems.get(str(root / "b.png"), [])]


def test_a_folder_that_cannot_be_listed_is_named(make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_dataset({"a.png": "a", "private/b.png": "b"})
    real_scandir = os.scandir
    locked = {str(root / "private")}

    def scandir(path):  # type: ignore[no-untyped-def]
        if str(path) in locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(scan_module.os, "scandir", scandir)
    problems = _check(root).by_path()
    assert [p.code for p in problems[str(root / "private")]] == ["unreadable_folder"]
    locked.add(str(root))
    with pytest.raises(DatasetError, match=r"cannot be read \(Permission denied\)"):
        scan_concept_report(ConceptSection(path=str(root)))


def test_images_the_trainer_skips_are_errors_and_fail_the_check(make_dataset: MakeDataset,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset({})
    png_header_only(root / "bomb.png", 20000, 20000)
    (root / "bomb.txt").write_text("a huge picture", encoding="utf-8")
    assert cli_main(["check-dataset", str(root)]) == 1  # the only image cannot be trained
    assert "untrainable_size" not in capsys.readouterr().err
    for name, size in (("dot.png", (1, 1)), ("line.png", (5000, 1))):
        make_image(root / name, size=size)
        (root / name).with_suffix(".txt").write_text("x", encoding="utf-8")
    problems = _check(root).by_path()
    for name in ("bomb.png", "dot.png", "line.png"):
        assert [(p.severity, p.code) for p in problems[str(root / name)]] == [("error", "untrainable_size")], name


def test_leftovers_of_killed_caption_saves_are_listed_and_removed(make_dataset: MakeDataset) -> None:
    from studio.core.files import remove_leftover_temp_files

    root = make_dataset({"a.png": "a"})
    old = time.time() - 3600
    stale = [root / f".a.txt.{i:08x}.tmp" for i in range(3)]
    for path in stale:
        path.write_text("half a caption", encoding="utf-8")
        os.utime(path, (old, old))
    fresh = root / ".a.txt.0badcafe.tmp"  # a save going on right now
    fresh.write_text("being written", encoding="utf-8")
    listed = [p for p in _check(root).problems if p.code == "leftover_temp_file"]
    assert sorted(p.path for p in listed) == sorted(str(p) for p in stale)
    assert remove_leftover_temp_files([root]) == sorted(stale)
    assert not any(p.exists() for p in stale) and fresh.exists()
    assert (root / "a.txt").read_text(encoding="utf-8") == "a"


def test_a_missing_model_folder_is_a_path_not_a_hub_id(tmp_path: Path) -> None:
    config = TrainConfig(model=ModelSection(family="sd15", base="models/tiny-sd15"), dataset=DatasetSection())
    assert resolve_paths(config, tmp_path).model.base == "models/tiny-sd15"  # could be org/name on the hub
    (tmp_path / "models").mkdir()  # the person keeps models there: this one is missing, not on the hub
    assert resolve_paths(config, tmp_path).model.base == str(tmp_path / "models" / "tiny-sd15")
