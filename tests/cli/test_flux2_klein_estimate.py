"""`studio-train estimate` of the FLUX.2 [klein] presets: each is sized from its own full-size architecture
(the 4B's or the 9B's counts in resources/architectures/), and the base model decides which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.cli import main as cli
from studio.core.families import family
from studio.core.families.flux2_klein import size_of


def _transformer_line(out: str) -> str:
    return next(line for line in out.splitlines() if "Flux2Transformer2DModel weights" in line)


def test_the_4b_and_9b_presets_are_estimated_from_their_own_architecture(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["estimate", "--preset", "flux2-klein-4b-lora-16gb", "--hardware", "rtx4090-24gb"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Preset flux2-klein-4b-lora-16gb (FLUX.2 [klein] 4B LoRA (16 GB)): promises 16 GB")
    assert "3,876 M parameters, fp8 e4m3 (frozen)" in _transformer_line(out)
    assert "The estimate keeps the promise." in out and "(caching phase peak)" in out
    assert cli(["estimate", "--preset", "flux2-klein-9b-lora-40gb", "--hardware", "rtx4090-24gb"]) == 0
    out = capsys.readouterr().out
    assert "9,079 M parameters" in _transformer_line(out)


def test_a_base_models_size_comes_from_its_transformer_config_else_its_name(tmp_path: Path) -> None:
    folder = tmp_path / "my-klein"
    (folder / "transformer").mkdir(parents=True)
    (folder / "transformer" / "config.json").write_text(json.dumps({"joint_attention_dim": 12288}), encoding="utf-8")
    assert size_of(str(folder)) == "9b"  # the folder's name says nothing; its config does
    assert size_of("black-forest-labs/FLUX.2-klein-base-9B") == "9b"
    assert size_of("black-forest-labs/FLUX.2-klein-base-4B") == "4b"
    assert family("flux2-klein").architecture(str(folder)) == "flux2-klein-9b"
    assert family("sd3").architecture(str(folder)) == "sd3"
