"""The forward FLOPs behind MFU match a fresh count of the real architecture on the meta device."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def test_stored_sd15_flops_match_a_fresh_count() -> None:
    spec = importlib.util.spec_from_file_location("count_flops", ROOT / "benchmarks" / "count_flops.py")
    assert spec is not None and spec.loader is not None
    counter = importlib.util.module_from_spec(spec)
    sys.modules["count_flops"] = counter
    spec.loader.exec_module(counter)
    stored = json.loads((ROOT / "resources" / "architectures" / "flops.json").read_text())["families"]["sd15"]
    flops, params = counter.forward_flops("sd15")
    assert params == stored["params"]
    assert flops / 1e12 == pytest.approx(stored["forward_tflop"], abs=1e-4), (
        "resources/architectures/flops.json is stale: run `python benchmarks/count_flops.py`")
