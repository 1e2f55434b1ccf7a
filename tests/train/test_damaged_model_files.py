"""A model folder with a weight file cut short, or a config asking for more layers than its weights hold:
`studio-train model` names the file and what to do (read from the headers, no weights loaded), and a
run from it ends as a model error naming the file, not as a crash with a traceback."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.core.config.schema import ModelSection, TrainConfig
from studio.core.runs.events import Error, Event, RunFinished

torch = pytest.importorskip("torch")

REDOWNLOAD = "download the model again (the file was cut off while downloading or copying)"
MISMATCH = "the config does not match its weights: download the model again"


def cut_in_half(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def more_layers(config: Path) -> None:
    data = json.loads(config.read_text(encoding="utf-8"))
    data["n_layers"] += 1
    config.write_text(json.dumps(data), encoding="utf-8")


def broken_copy(tiny_model: Callable[[str], Path], tmp_path: Path, damage: str) -> tuple[Path, Path, str, str]:
    """A copy of the tiny Z-Image folder with one damage: (folder, the file to name, what the message says, fix)."""
    folder = tmp_path / "tiny-zimage-copy"
    shutil.copytree(tiny_model("zimage"), folder)
    if damage == "cut":
        file = folder / "text_encoder" / "model.safetensors"
        size = file.stat().st_size
        cut_in_half(file)
        return folder, file, f"{file} is cut short: it holds {size // 2:,} bytes, its header says {size:,}", REDOWNLOAD
    file = folder / "transformer" / "config.json"
    more_layers(file)
    return (folder, file, f"{file} says n_layers = 3, but its weights (diffusion_pytorch_model.safetensors) "
            "hold 2 (layers.0 to layers.1)", MISMATCH)


@pytest.mark.parametrize("damage", ["cut", "layers"])
def test_the_model_check_names_the_broken_file_and_what_to_do(tiny_model: Callable[[str], Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str], damage: str) -> None:
    folder, _file, says, fix = broken_copy(tiny_model, tmp_path, damage)
    assert cli_main(["model", str(folder)]) == 1
    out = capsys.readouterr().out
    assert f"  cannot train from it: {says}; {fix}" in out
    assert "loads offline" not in out and "Traceback" not in out


@pytest.mark.parametrize("damage", ["cut", "layers"])
def test_a_run_from_a_broken_model_is_a_model_error_naming_the_file(
        make_config: Callable[..., TrainConfig], run_training: Callable[..., tuple[int, Path]],
        events_of: Callable[[Path], list[Event]], tiny_model: Callable[[str], Path], tmp_path: Path,
        damage: str) -> None:
    folder, file, says, fix = broken_copy(tiny_model, tmp_path, damage)
    config = make_config("zimage", model=ModelSection(family="zimage", base=str(folder)))
    code, run_dir = run_training(config, tmp_path)
    assert code == 1
    events = events_of(run_dir)
    (error,) = [e for e in events if isinstance(e, Error)]
    assert error.kind == "model", error.message
    assert error.message == f"the model cannot be loaded: {says}"
    assert error.path == str(file) and error.hint.startswith(fix)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "failed"


def test_a_file_cut_short_after_the_check_is_named_when_loading_fails(tiny_model: Callable[[str], Path],
                                                                     tmp_path: Path) -> None:
    """The check before loading passed, then the file was damaged (or a loader reads what the check does not):
    the loader's own error (safetensors' "incomplete metadata") becomes the same model error."""
    from diffusers import ZImagePipeline

    from studio.train.errors import TrainError
    from studio.train.families.loading import load_or_fail

    folder = tmp_path / "tiny-zimage-copy"
    shutil.copytree(tiny_model("zimage"), folder)
    file = folder / "text_encoder" / "model.safetensors"
    cut_in_half(file)
    with pytest.raises(TrainError) as caught:
        load_or_fail("pipeline", str(folder), lambda: ZImagePipeline.from_pretrained(str(folder)))
    assert caught.value.kind == "model" and caught.value.path == str(file)
    assert caught.value.message.startswith(f"the model cannot be loaded: {file} is cut short")
    assert caught.value.hint == REDOWNLOAD


def test_a_separate_vae_file_cut_short_is_named_when_it_fails_to_load(tiny_model: Callable[[str], Path],
                                                                      tmp_path: Path) -> None:
    """model.vae is not read before loading: its loader's failure is turned into the same model error."""
    from studio.train.errors import TrainError
    from studio.train.families.loading import load_vae

    file = tmp_path / "vae.safetensors"
    shutil.copyfile(tiny_model("zimage") / "vae" / "diffusion_pytorch_model.safetensors", file)
    cut_in_half(file)
    with pytest.raises(TrainError) as caught:
        load_vae(str(file), "sd15")
    assert caught.value.kind == "model" and caught.value.path == str(file)
    assert caught.value.message.startswith(f"the model cannot be loaded: {file} is cut short: it holds ")
    assert caught.value.hint == REDOWNLOAD
