"""`studio-train tiny FAMILY DIR` writes random weights only into a new, empty or studio-built folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.cli import main


def _downloaded_model(folder: Path) -> Path:
    (folder / "unet").mkdir(parents=True)
    (folder / "model_index.json").write_text('{"_class_name": "StableDiffusionXLPipeline"}', encoding="utf-8")
    weights = folder / "unet" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(b"a person's real weights")
    return weights


@pytest.mark.parametrize("extra", [[], ["--full-size", "--write"]])
def test_a_downloaded_model_folder_is_refused_and_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              extra: list[str]) -> None:
    folder = tmp_path / "sdxl-base"
    weights = _downloaded_model(folder)
    assert main(["tiny", "sdxl", str(folder), *extra]) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and "not empty" in err and "--force" in err and "Traceback" not in err
    assert weights.read_bytes() == b"a person's real weights"
    assert sorted(p.name for p in folder.iterdir()) == ["model_index.json", "unet"]


def test_a_folder_the_studio_built_is_replaced(tmp_path: Path) -> None:
    from studio.train.pipelines.tiny import RANDOM_WEIGHTS_MARKER, prepare_model_folder

    folder = prepare_model_folder(tmp_path / "tiny-sd15")
    (folder / "text_encoder_3").mkdir()
    (folder / "text_encoder_3" / "model.safetensors").write_bytes(b"from an earlier build")
    assert prepare_model_folder(folder) == folder
    assert [p.name for p in folder.iterdir()] == [RANDOM_WEIGHTS_MARKER]


def test_a_folder_a_file_manager_only_showed_counts_as_empty(tmp_path: Path) -> None:
    from studio.train.pipelines.tiny import RANDOM_WEIGHTS_MARKER, prepare_model_folder

    folder = tmp_path / "new folder"
    folder.mkdir()
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    assert prepare_model_folder(folder) == folder
    assert (folder / RANDOM_WEIGHTS_MARKER).is_file()


def test_the_demos_model_is_built_over_a_build_an_earlier_studio_left_half_done(tmp_path: Path) -> None:
    """A demo whose model build stopped halfway under a studio from before the built-folder marker: the demo's
    folder is the studio's own, so the next start builds it again instead of refusing it as a person's model."""
    from studio.core.project.demo import DEMO_MODEL, create_demo_project, model_command

    project = create_demo_project(tmp_path / "demo")
    half = project.root / DEMO_MODEL / "unet"
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}", encoding="utf-8")
    command = model_command(project)
    assert main(command[command.index("tiny"):]) == 0  # as the window runs it, in this process
    assert (project.root / DEMO_MODEL / "model_index.json").is_file()
