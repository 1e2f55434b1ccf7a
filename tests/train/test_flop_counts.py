"""The forward FLOPs behind MFU match a fresh count of the real architecture on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.scripts import load_script

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def test_stored_sd15_flops_match_a_fresh_count() -> None:
    counter = load_script("benchmarks/count_flops.py")
    stored = json.loads((ROOT / "resources" / "architectures" / "flops.json").read_text())["families"]["sd15"]
    flops, params = counter.forward_flops("sd15")
    assert params == stored["params"]
    assert flops / 1e12 == pytest.approx(stored["forward_tflop"], abs=1e-4), (
        "resources/architectures/flops.json is stale: run `python benchmarks/count_flops.py`")


def test_stored_flops_of_a_transformer_family_match_a_fresh_count() -> None:
    """MFU of a FLUX.2 [klein] 4B run is measured against its own count, not another family's."""
    counter = load_script("benchmarks/count_flops.py")
    stored = json.loads((ROOT / "resources" / "architectures" / "flops.json").read_text())["families"]["flux2-klein"]
    flops, params = counter.forward_flops("flux2-klein")
    assert params == stored["params"] and stored["resolution"] == 1024 and stored["text_tokens"] == 512
    assert flops / 1e12 == pytest.approx(stored["forward_tflop"], abs=1e-4)
    assert 30 < stored["forward_tflop"] < 40  # about 2 x 3.9 B parameters x 4,608 tokens, plus attention
