"""benchmarks/gpu_acceptance.py on the CPU (--dry-run): a preset runs through `studio-train run` and lands
in the JSON and the markdown table the GPU run will write."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from fixtures.scripts import load_script

from studio.core.config.files.presets import get_preset
from studio.core.estimate.plans.preset_estimate import estimate_preset

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    return load_script("benchmarks/gpu_acceptance.py")


@pytest.mark.slow
def test_dry_run_of_one_preset_writes_the_table(tiny_sd15: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "results"
    code = _script().main(["--dry-run", "--only", "sd15-lora-6gb", "--steps", "4", "--model", f"sd15={tiny_sd15}",
                           "--run-timeout", "600",  # a busy CI machine: the run, not its speed, is checked
                           "--cap", "--context-mb", "512", "--out", str(out)])
    data = json.loads((out / "gpu_acceptance.json").read_text())
    assert code == 0, data["rows"][0]["log_tail"]
    assert data["dry_run"] is True and data["steps"] == 4 and data["every"] == 2
    (row,) = data["rows"]
    expected = estimate_preset(get_preset("sd15-lora-6gb")).estimate.total_gb
    assert row["preset"] == "sd15-lora-6gb" and row["promise_gb"] == 6
    assert row["status"] == "completed" and row["steps"] == 4
    assert row["cap_gb"] == 5.5 and data["context_mb"] == 512  # the 6 GB promise less the CUDA context
    assert row["estimate_gb"] == round(expected, 2)  # the full-size preset's estimate, with its samples
    assert 0.05 < row["measured_gb"] < 4  # the tiny trainer's RSS
    assert row["error_pct"] is None  # a tiny model's RSS says nothing about the estimate
    assert row["s_per_step"] > 0 and row["images_per_s"] == pytest.approx(2 / row["s_per_step"], rel=0.01)
    # Each phase's seconds, so a low-VRAM preset's phases can be held against its 24 GB preset's.
    assert {"loading", "steps", "saving", "other"} <= set(row["phases"]) and row["phases"]["steps"] > 0
    table = (out / "gpu_acceptance.md").read_text().splitlines()
    assert table[0].endswith("each run's allocator capped at its promise less 512 MB of CUDA context")
    assert table[2] == "| preset | promise | cap | estimate | measured peak | error | s/step | images/s | status |"
    assert table[4].startswith(f"| sd15-lora-6gb | 6 GB | 5.50 GB | {expected:.2f} GB | {row['measured_gb']:.2f} GB | "
                               "—% | ")
    assert table[4].endswith(" | completed |")
