"""Before a launch, an nf4 base is refused when the training environment lacks bitsandbytes, with the
words that install it; the training interpreter is asked, never the window's own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fixtures.checkpoints import SD15, write_checkpoint
from PIL import Image

from studio.core.config.files.paths import resolve_paths
from studio.core.project.folder import create_project
from studio.core.project.preflight import preflight

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stand-in interpreters are shell scripts")


def _interpreter(folder: Path, with_library: bool) -> str:
    """A Python without site-packages (so without bitsandbytes), or one that finds a stand-in package."""
    folder.mkdir(parents=True)
    path = ""
    if with_library:
        (folder / "site" / "bitsandbytes").mkdir(parents=True)
        (folder / "site" / "bitsandbytes" / "__init__.py").write_text("", encoding="utf-8")
        path = f"PYTHONPATH={folder / 'site'} "
    script = folder / "python"
    script.write_text(f'#!/bin/sh\n{path}exec "{sys.executable}" -S "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    return str(script)


def _problems(tmp_path: Path, quantized: str, python: str) -> list[str]:
    root = tmp_path / "project"
    (root / "10_shapes").mkdir(parents=True)
    for i in range(2):
        Image.new("RGB", (16, 16)).save(root / "10_shapes" / f"{i}.png")
    project = create_project(root)
    config = project.load_config()
    write_checkpoint(tmp_path / "m.safetensors", SD15)
    config.model.base, config.model.family = str(tmp_path / "m.safetensors"), "sd15"  # type: ignore[assignment]
    config.model.quantized_base = quantized  # type: ignore[assignment]
    config.launch.python = python
    return [str(p) for p in preflight(resolve_paths(config, root), None)]


def test_a_training_environment_without_bitsandbytes_is_refused_with_the_install_words(tmp_path: Path) -> None:
    bare = _interpreter(tmp_path / "bare", with_library=False)
    assert _problems(tmp_path / "a", "nf4", bare) == [
        f'model.quantized_base = "nf4" needs the bitsandbytes library, which the training environment {bare} '
        'lacks: install it there with pip install "sd-training-studio[cuda]" (or pip install bitsandbytes), or '
        'set model.quantized_base = "none".']
    assert _problems(tmp_path / "b", "none", bare) == []  # a full-precision base needs no library
    assert _problems(tmp_path / "c", "int8", bare) == []  # nor the studio's own int8


def test_a_training_environment_with_bitsandbytes_passes(tmp_path: Path) -> None:
    assert _problems(tmp_path, "nf4", _interpreter(tmp_path / "with", with_library=True)) == []


def test_8bit_adamw_on_a_gpu_without_bitsandbytes_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    # The trainer refused it only when it built the optimizer, after loading the model (and caching).
    from studio.core.hardware.machine.probe import load_hardware

    bare = _interpreter(tmp_path / "bare", with_library=False)
    gpu = load_hardware("rtx4090-24gb").gpus[0]

    def problems(folder: Path, optimizer: str, on_gpu: bool, python: str = bare) -> list[str]:
        root = folder / "project"
        (root / "10_shapes").mkdir(parents=True)
        Image.new("RGB", (16, 16)).save(root / "10_shapes" / "0.png")
        config = create_project(root).load_config()
        write_checkpoint(folder / "m.safetensors", SD15)
        config.model.base, config.model.family = str(folder / "m.safetensors"), "sd15"  # type: ignore[assignment]
        config.training.optimizer = optimizer  # type: ignore[assignment]
        config.launch.python = python
        found = preflight(resolve_paths(config, root), gpu if on_gpu else None)
        return [str(p) for p in found if p.check == "library"]

    assert problems(tmp_path / "a", "adamw8bit", True) == [
        f'training.optimizer = "adamw8bit" needs the bitsandbytes library, which the training environment {bare} '
        'lacks: install it there with pip install "sd-training-studio[cuda]" (or pip install bitsandbytes), or '
        'choose training.optimizer = "adamw".']
    assert problems(tmp_path / "b", "adamw8bit", False) == []  # on the CPU the trainer takes AdamW, and says so
    assert problems(tmp_path / "c", "adamw", True) == []
    assert problems(tmp_path / "d", "adamw8bit", True, _interpreter(tmp_path / "with", with_library=True)) == []
