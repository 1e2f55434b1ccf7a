"""The model library: checkpoints found where people keep them, each read from its header."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fixtures.checkpoints import SD15, SDXL
from fixtures.checkpoints import write_checkpoint as _write

from studio.cli import main
from studio.core.models import library as model_library
from studio.core.models.library import scan_library


def write_checkpoint(path: Path, shapes: dict[str, list[int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return _write(path, shapes)


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder with ComfyUI, Forge and Stability Matrix installs, a hub cache and a folder of one's own."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    comfy = home / "ComfyUI" / "models"
    write_checkpoint(comfy / "checkpoints" / "dreamshaper 8.safetensors", SD15)
    write_checkpoint(comfy / "checkpoints" / "xl" / "juggernaut XL.safetensors", SDXL)
    (comfy / "checkpoints" / "cut.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    diffusers = comfy / "diffusers" / "my model"
    (diffusers / "unet").mkdir(parents=True)
    (diffusers / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionXLPipeline"}))
    (diffusers / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(b"0" * 1000)
    forge = home / "stable-diffusion-webui-forge" / "models" / "Stable-diffusion"
    forge.mkdir(parents=True)
    (forge / "old.ckpt").write_bytes(b"PK\x03\x04")
    matrix = home / ".local" / "share" / "StabilityMatrix" / "Models" / "StableDiffusion"
    matrix.mkdir(parents=True)
    os.symlink(comfy / "checkpoints" / "dreamshaper 8.safetensors", matrix / "dreamshaper 8.safetensors")
    snapshot = tmp_path / "hf" / "models--org--tiny" / "snapshots" / "abc"
    (snapshot / "unet").mkdir(parents=True)
    (snapshot / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    (snapshot / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(b"0" * 500)
    (tmp_path / "hf" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hf" / "models--org--tiny" / "refs" / "main").write_text("abc")
    mine = tmp_path / "my models"
    write_checkpoint(mine / "v1.safetensors", SD15)
    monkeypatch.setenv("STUDIO_MODEL_FOLDERS", str(mine))
    return tmp_path


def _rows(models: list[model_library.LibraryModel], root: Path) -> list[tuple[str, str, str | None, str, bool]]:
    return [(m.place, m.path.relative_to(root).as_posix() if m.hub_id is None else m.hub_id, m.family, m.label,
             m.trainable) for m in models]


def test_models_are_found_where_people_keep_them(machine: Path) -> None:
    models = scan_library()
    assert _rows(models, machine) == [
        ("Forge Stable-diffusion", "home/stable-diffusion-webui-forge/models/Stable-diffusion/old.ckpt", None,
         "model of an unknown family", False),
        ("ComfyUI checkpoints", "home/ComfyUI/models/checkpoints/cut.safetensors", None, "unreadable model", False),
        ("ComfyUI checkpoints", "home/ComfyUI/models/checkpoints/dreamshaper 8.safetensors", "sd15",
         "Stable Diffusion 1.x checkpoint", True),
        ("ComfyUI checkpoints", "home/ComfyUI/models/checkpoints/xl/juggernaut XL.safetensors", "sdxl",
         "SDXL base checkpoint", True),
        ("ComfyUI diffusers", "home/ComfyUI/models/diffusers/my model", "sdxl", "SDXL model", True),
        # Stability Matrix links the same file: it is listed once.
        ("Hugging Face cache", "org/tiny", "sd15", "SD 1.x/2.x model", True),
        ("Added by you", "my models/v1.safetensors", "sd15", "Stable Diffusion 1.x checkpoint", True),
    ]
    by_base = {m.base: m for m in models}
    assert by_base["org/tiny"].size_bytes == 500  # the weights the snapshot links to
    assert "is cut short" in str(models[1].problem)
    assert by_base[str(machine / "home/ComfyUI/models/diffusers/my model")].size_bytes == 1000


def test_a_second_scan_reads_no_header_unless_the_file_changed(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = scan_library()
    read: list[Path] = []
    real = model_library.detect_model
    monkeypatch.setattr(model_library, "detect_model", lambda path: read.append(path) or real(path))
    assert scan_library() == first and read == []
    changed = machine / "my models" / "v1.safetensors"
    write_checkpoint(changed, SDXL)
    os.utime(changed, ns=(1, 1))
    again = {m.path: m for m in scan_library()}
    assert read == [changed] and again[changed].family == "sdxl"


def test_studio_train_models_lists_and_remembers_folders(
    machine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STUDIO_MODEL_FOLDERS")
    extra = tmp_path / "extra"
    write_checkpoint(extra / "sub" / "x.safetensors", SDXL)
    assert main(["models", "--add", str(extra), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[-1] == {"path": str(extra / "sub" / "x.safetensors"), "place": "Added by you", "size_bytes": rows[-1][
        "size_bytes"], "family": "sdxl", "label": "SDXL base checkpoint", "problem": None, "hub_id": None,
        "trainable": True, "base": str(extra / "sub" / "x.safetensors")}
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert f"sdxl     0.0 GB  SDXL base checkpoint                    {extra / 'sub' / 'x.safetensors'}  (Added by " \
           "you)" in text
    assert "[cannot train: " in text
    assert main(["models", "--remove", str(extra), "--json"]) == 0
    assert str(extra) not in capsys.readouterr().out
    assert main(["models", "--add", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_adding_a_folder_keeps_only_the_persons_folders(
    machine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = tmp_path / "extra"
    write_checkpoint(extra / "x.safetensors", SDXL)
    # $STUDIO_MODEL_FOLDERS (a portable install's launcher) names "my models" for this session only.
    assert main(["models", "--add", str(extra), "--json"]) == 0
    capsys.readouterr()
    monkeypatch.delenv("STUDIO_MODEL_FOLDERS")
    assert model_library.model_places()[-1:] == [model_library.ModelPlace("Added by you", extra)]
    assert main(["models", "--json"]) == 0
    assert str(tmp_path / "my models") not in capsys.readouterr().out  # not made a folder of one's own
    # Removing a folder never added says so, instead of listing the models as if it had worked.
    assert main(["models", "--remove", str(tmp_path / "my models")]) == 2
    assert f"{tmp_path / 'my models'} is not among the folders you added ({extra})" in capsys.readouterr().err


def test_studio_train_models_known_says_what_is_downloaded(machine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--known", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["id"], r["downloaded"], r["gated"]) for r in rows][:3] == [
        ("stable-diffusion-v1-5/stable-diffusion-v1-5", False, False),
        ("stabilityai/stable-diffusion-xl-base-1.0", False, False),
        ("stabilityai/stable-diffusion-3-medium-diffusers", False, True)]
