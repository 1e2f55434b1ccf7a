"""benchmarks/gpu_block_swap.py --dry-run: the block-swap benchmark's code path on the tiny SD3, on the CPU."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
from fixtures.scripts import left_in, load_script, script_env
from fixtures.waits import scaled_s

from studio.core.families import family

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


def test_a_rows_model_is_gone_before_the_next_row_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row's swap hooks hold the swap, which holds the blocks: a cycle that kept the row's blocks (on a GPU,
    their weights) alive while the next row ran, inflating that row's peak. Python's collector is held off here, as it
    may be between two rows: each row's model and blocks must be gone all the same."""
    bench = load_script("benchmarks/gpu_block_swap.py")
    # A row first, for its imports: one logs a warning with its traceback, which pytest's log capture keeps, and
    # with it the frames of the row that imported (and that row's model).
    bench.measure(0, False, True, 0, 1, tmp_path)
    models: list[weakref.ref[Any]] = []  # each row's model and its repeated blocks
    blocks = family("sd3").checkpointed_blocks
    alive_at_start: list[int] = []
    real_step, real_measure = bench.bare_step, bench.measure

    def bare_step(*args: Any, **kwargs: Any) -> Any:
        step = real_step(*args, **kwargs)
        models.extend(weakref.ref(m) for m in step.model.modules() if m is step.model or type(m).__name__ in blocks)
        return step

    def measure(*args: Any, **kwargs: Any) -> Any:
        alive_at_start.append(sum(ref() is not None for ref in models))
        return real_measure(*args, **kwargs)

    monkeypatch.setattr(bench, "bare_step", bare_step)
    monkeypatch.setattr(bench, "measure", measure)
    gc.collect()
    gc.disable()
    try:
        assert bench.main(["--dry-run", "--warmup", "1", "--steps", "1", "--out", str(tmp_path / "out")]) == 0
    finally:
        gc.enable()
    assert alive_at_start == [0, 0, 0, 0]
