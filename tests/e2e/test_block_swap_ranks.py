"""model.blocks_to_swap under data parallelism: two CPU ranks (`accelerate launch`) each keep their own swapped
blocks, train one adapter, and end with the same weights."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fixtures.waits import scaled_s

from studio.core.config.paths import resolve_paths
from studio.core.config.schema import ModelSection, OutputSection, TrainingSection
from studio.core.runs.events import RunFinished, RunStarted, Step
from studio.core.runs.launch import prepare_run

pytest.importorskip("torch")


@pytest.mark.slow
def test_two_cpu_ranks_with_swapped_blocks_train_one_adapter(make_config, events_of, tiny_flux2_klein: Path,
                                                            tmp_path: Path) -> None:
    config = make_config(
        model=ModelSection(family="flux2-klein", base=str(tiny_flux2_klein), blocks_to_swap=2),
        training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1, gradient_checkpointing=True),
        output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers"]),
    )
    plan = prepare_run(resolve_paths(config, tmp_path), num_processes=2)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    result = subprocess.run(plan.command, env=env, capture_output=True, text=True, timeout=scaled_s(180))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    events = events_of(plan.run_dir)
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.world_size == 2
    assert [s.step for s in events if isinstance(s, Step)] == [1, 2]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed"
    checksums = finished.weight_checksums
    assert len(checksums) == 2 and checksums[0] == checksums[1]  # identical adapters on both ranks
