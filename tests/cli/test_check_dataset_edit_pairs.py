"""`studio-train check-dataset` on a folder of edit pairs in each layout people use: the control images are
read as controls (never counted as images), a broken pair is named with its file, and the exit code says
whether the pairs can be used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from studio.cli import main as cli_main


def _png(path: Path, size: tuple[int, int] = (64, 48), shade: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (shade, 120, 255 - shade)).save(path)
    return path


def _targets(root: Path) -> Path:
    for i, name in enumerate(("cat", "dog")):
        _png(root / f"{name}.png", shade=100 * i)
        (root / f"{name}.txt").write_text(f"turn the {name} into a statue", encoding="utf-8")
    return root


def _check(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    code = cli_main(["check-dataset", *args, "--resolution", "32", "--json"])
    return code, json.loads(capsys.readouterr().out)


def _codes(report: dict[str, object]) -> list[tuple[str, str]]:
    return [(str(p["code"]), str(p["path"])) for p in report["problems"]]  # type: ignore[attr-defined]


def test_a_control_folder_beside_the_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _targets(tmp_path / "pairs")
    _png(root / "control" / "cat.png", shade=10)
    _png(root / "control" / "dog.jpg", shade=20)
    _png(root / "control_1" / "dog.png", shade=30)
    assert _check([str(root)], capsys) == (0, {"images": 2, "errors": 0, "warnings": 0, "problems": [],
                                               "control_layouts": ["folder"]})
    (root / "control" / "cat.png").unlink()
    code, report = _check([str(root)], capsys)
    assert (code, _codes(report)) == (1, [("missing_control", str(root / "cat.png"))])
    assert cli_main(["check-dataset", str(root), "--resolution", "32"]) == 1
    text = capsys.readouterr().out
    assert "edit pairs: control images from control/ folders beside the targets" in text
    assert f"error: {root / 'cat.png'}: this target has no control image (in the control/ folder beside it) " \
           f"(add {root / 'control' / 'cat.png'} (the image the instruction edits), or remove the target)" in text


def test_name_control_images_beside_the_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _targets(tmp_path / "pairs")
    _png(root / "cat_control.png", shade=10)
    _png(root / "dog_control_0.png", shade=20)
    _png(root / "dog_control_1.png", shade=30, size=(48, 48))
    _png(root / "owl_control.png", shade=40)
    code, report = _check([str(root)], capsys)
    assert (code, report["images"], report["control_layouts"]) == (0, 2, ["suffix"])
    assert _codes(report) == [("control_aspect", str(root / "dog_control_1.png")),
                              ("orphan_control", str(root / "owl_control.png"))]


def test_ai_toolkit_control_path_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ai-toolkit: control_path_1, control_path_2 ..., one reference each, named as the target."""
    root = _targets(tmp_path / "dataset" / "target")
    for folder in ("control1", "control2"):
        _png(tmp_path / "dataset" / folder / "cat.png", shade=11 if folder == "control1" else 12)
        _png(tmp_path / "dataset" / folder / "dog.jpg", shade=21 if folder == "control1" else 22)
    (tmp_path / "dataset" / "control2" / "dog.jpg").write_bytes(b"\xff\xd8 cut off")
    code, report = _check([str(root), "--control-folder", str(tmp_path / "dataset" / "control1"),
                           "--control-folder", str(tmp_path / "dataset" / "control2")], capsys)
    assert (code, report["images"], report["control_layouts"]) == (1, 2, ["separate"])
    assert _codes(report) == [("unreadable_control", str(tmp_path / "dataset" / "control2" / "dog.jpg"))]


def test_ai_toolkit_control_folders_beside_the_targets_are_found_by_themselves(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dataset/target/ with dataset/control/ and dataset/control2/ beside it, as ai-toolkit datasets are kept."""
    root = _targets(tmp_path / "dataset" / "target")
    _png(tmp_path / "dataset" / "control" / "cat.png", shade=11)
    _png(tmp_path / "dataset" / "control" / "dog.png", shade=21)
    _png(tmp_path / "dataset" / "control2" / "cat.png", shade=12)
    code, report = _check([str(root)], capsys)
    assert (code, report["images"], report["control_layouts"], report["problems"]) == (0, 2, ["separate"], [])


def test_a_musubi_tuner_control_directory_in_a_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """musubi-tuner: one control_directory, named as the target or numbered name_0, name_1 for several."""
    from studio.core.project.folder import create_project, default_config

    config = default_config("images")
    config.dataset.kind, config.dataset.control_folders = "edit", ["controls"]
    project = create_project(tmp_path / "proj", config)
    _targets(project.root / "images")
    _png(project.root / "controls" / "cat.png", shade=10)
    _png(project.root / "controls" / "dog_0000.png", shade=20)  # four digits, as musubi-tuner allows
    _png(project.root / "controls" / "dog_0001.png", shade=30)
    _png(project.root / "controls" / "bird_0.png", shade=40)
    code, report = _check([str(project.root)], capsys)
    assert (code, report["images"], report["control_layouts"]) == (0, 2, ["separate"])
    assert _codes(report) == [("orphan_control", str(project.root / "controls" / "bird_0.png"))]
