"""benchmarks/gpu_block_swap.py --dry-run: the block-swap benchmark's code path on the tiny SD3, on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.scripts import left_in, script_env
from fixtures.waits import scaled_s

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_dry_run_swaps_blocks_with_the_unswapped_losses_and_writes_the_table(tmp_path: Path) -> None:
    env, temp = script_env(tmp_path)
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_block_swap.py"), "--dry-run", "--warmup", "1",
               "--steps", "2", "--out", str(tmp_path / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=scaled_s(300))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [(r["swapped"], r["checkpointing"]) for r in rows] == [(0, True), (1, True), (0, False), (1, False)]
    for row in rows:
        assert row["s_per_step"] > 0 and row["loss_difference"] <= 1e-6 and len(row["losses"]) == 3
        assert row["most_resident"] == row["swapped"]  # the one swapped block came and went
        assert (row["swapped_gib"] > 0) == (row["swapped"] > 0)
    assert "| 1 | yes |" in (tmp_path / "out" / "table.md").read_text()
    # its tiny model lived in a scratch folder, removed at the end (torch's own inductor folder may stay)
    assert left_in(temp) == []
