"""The acceptance table's phase comparison: each low-VRAM preset's phases against its model's larger preset."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def row(preset: str, promise: float, **phases: float) -> SimpleNamespace:
    return SimpleNamespace(preset=preset, promise_gb=promise, status="completed", phases=phases)


def test_a_phase_over_twice_the_larger_preset_s_is_marked() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from phase_compare import phase_comparison

    rows = [row("sdxl-lora", 16, loading=10.0, steps=100.0), row("sdxl-lora-8gb", 8, loading=30.0, steps=150.0),
            row("sd15-lora", 8, loading=3.0)]  # alone for its model: nothing to compare
    table = phase_comparison(rows, lambda preset: preset.split("-")[0]).splitlines()
    assert "| sdxl-lora-8gb | sdxl-lora | loading | 30.0 | 10.0 | 3.0x **over 2x** |" in table
    assert "| sdxl-lora-8gb | sdxl-lora | steps | 150.0 | 100.0 | 1.5x |" in table
    assert not [line for line in table if line.startswith(("| sdxl-lora |", "| sd15-lora |"))]
    assert phase_comparison(rows[2:], lambda preset: preset.split("-")[0]) == ""
