"""benchmarks/gpu_scaling.py: the dry run (CPU ranks) of a DreamBooth preset sharded on two processes lands in
the table the first multi-GPU machine will fill; the efficiency and the table from rows of several counts."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
HEADER = "| preset | GPUs | strategy | global batch | images/s | scaling efficiency | per-GPU peak | status |"


def _script() -> ModuleType:
    return load_script("benchmarks/gpu_scaling.py")


def test_efficiency_is_against_the_smallest_count_that_ran() -> None:
    script = _script()
    rows = [script.Row("p", 1, "ddp", 2, 10.0, status="completed"),
            script.Row("p", 2, "fsdp", 4, 18.0, status="completed"),
            script.Row("p", 4, "fsdp", 8, None, status="failed", message="oom: out of memory"),
            script.Row("q", 2, "ddp", 4, 6.0, status="completed"), script.Row("q", 8, "ddp", 16, 21.0, status="completed")]
    script.add_efficiency(rows)
    assert [r.efficiency for r in rows] == [1.0, 0.9, None, 1.0, 0.875]
    table = script.markdown(rows, {"date": "d", "gpu": "8 x G", "steps": 20, "warmup": 3, "dry_run": False})
    lines = table.splitlines()
    assert lines[0] == "GPU scaling, d: 8 x G; 20 timed steps after 3" and lines[2] == HEADER
    assert lines[5] == "| p | 2 | FSDP | 4 | 18.00 | 90% | — GB | completed |"
    assert lines[6] == "| p | 4 | FSDP | 8 | — | — | — GB | failed |"


def test_a_preset_with_adafactor_is_sharded_with_adamw(tmp_path: Path) -> None:
    """The 24 GB DreamBooth presets train with Adafactor, whose update cannot take split weights: on several
    GPUs the benchmark trains them with AdamW (its state split with the weights) instead."""
    from studio.core.config.files.presets import get_preset

    script = _script()
    preset = get_preset("sdxl-dreambooth-24gb")
    assert preset.delta["training"]["optimizer"] == "adafactor"
    sharded = script.run_config(preset, tmp_path / "model", tmp_path, 2, 10, dry_run=False)
    assert (sharded.launch.strategy, sharded.training.optimizer) == ("fsdp", "adamw")
    single = script.run_config(preset, tmp_path / "model", tmp_path, 1, 10, dry_run=False)
    assert (single.launch.strategy, single.training.optimizer) == ("ddp", "adafactor")


@pytest.mark.slow
def test_dry_run_fills_the_scaling_table(tiny_sd15: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "results"
    # sd15-dreambooth asks for fp16, which a sharded run cannot use: the script runs it in bf16 (no on CPU).
    code = _script().main(["--dry-run", "--preset", "sd15-dreambooth", "--gpus", "2", "--model",
                           f"sd15={tiny_sd15}", "--out", str(out)])
    data = json.loads((out / "gpu_scaling.json").read_text())
    assert code == 0, data["rows"]
    (row,) = data["rows"]
    assert (row["gpus"], row["strategy"], row["status"]) == (2, "fsdp", "completed")
    assert row["global_batch"] == 2 * 1 and row["images_per_s"] > 0 and row["peak_gb"] > 0
    assert row["efficiency"] == 1.0  # the only count that ran is its own reference
    table = (out / "gpu_scaling.md").read_text().splitlines()
    assert table[0].endswith("(dry run: tiny models on CPU ranks, not a measure of scaling)")
    assert table[2] == HEADER
    assert table[4] == f"| sd15-dreambooth | 2 | FSDP | 2 | {row['images_per_s']:.2f} | 100% | {row['peak_gb']:.2f} GB | completed |"
