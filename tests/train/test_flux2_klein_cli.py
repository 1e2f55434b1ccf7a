"""`studio-train tiny flux2-klein`: the tiny pipeline offline, and the full-size 4B / 9B counts (meta device)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from studio.cli import main

pytest.importorskip("torch")


def test_tiny_builds_a_klein_folder_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny", "flux2-klein", str(tmp_path / "klein")]) == 0
    assert f"tiny flux2-klein pipeline written to {tmp_path / 'klein'}" in capsys.readouterr().out
    index = json.loads((tmp_path / "klein" / "model_index.json").read_text(encoding="utf-8"))
    assert index["_class_name"] == "Flux2KleinPipeline"
    assert index["transformer"] == ["diffusers", "Flux2Transformer2DModel"]
    assert index["vae"] == ["diffusers", "AutoencoderKLFlux2"] and index["text_encoder"][1] == "Qwen3ForCausalLM"
    tokenizer = json.loads((tmp_path / "klein" / "tokenizer" / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = tokenizer.get("chat_template") or (tmp_path / "klein" / "tokenizer" / "chat_template.jinja").read_text()
    assert "<|im_start|>" in template and "enable_thinking" in template


@pytest.mark.parametrize(("size", "transformer", "encoder"), [("4b", "3,875.5", "4,022.5"), ("9b", "9,078.6", "8,190.7")])
def test_full_size_prints_the_published_architecture(size: str, transformer: str, encoder: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny", "flux2-klein", "--full-size", "--size", size]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^transformer +{transformer} M parameters$", out, re.M)
    assert re.search(rf"^text_encoder +{encoder} M parameters$", out, re.M)
    assert f"(FLUX.2 [klein] {size.upper()})" in out and "nothing written" in out
