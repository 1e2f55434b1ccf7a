"""The validation loss and the TensorBoard log with two CPU ranks: written once, by rank 0, and the numbers
one rank with the same global batch measures."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
from fixtures.waits import scaled_s

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import DatasetSection, TrainingSection
from studio.core.runs.events import Validation
from studio.core.runs.launch import prepare_run

pytest.importorskip("torch")
HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


@pytest.mark.slow
def test_two_ranks_measure_what_one_rank_measures(make_config, events_of, run_training, demo_data: Path,
                                                  tmp_path: Path) -> None:
    def config(batch: int):  # type: ignore[no-untyped-def]
        made = make_config(
            dataset=DatasetSection(concepts=[{"path": str(demo_data)}], resolution=64, buckets=False,  # type: ignore[list-item]
                                   validation_fraction=0.25),
            training=TrainingSection(batch_size=batch, max_steps=4, learning_rate=1e-3, seed=1, validation_every=2),
        )
        made.output.log_to = ["tensorboard"] if batch == 2 and HAS_TENSORBOARD else []
        return made

    plan = prepare_run(resolve_paths(config(2), tmp_path), num_processes=2)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    result = subprocess.run(plan.command, env=env, capture_output=True, text=True, timeout=scaled_s(240))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    two = [e for e in events_of(plan.run_dir) if isinstance(e, Validation)]
    assert [e.step for e in two] == [2, 4]  # once each, by rank 0
    code, one_dir = run_training(config(4), tmp_path)
    assert code == 0
    one = [e for e in events_of(one_dir) if isinstance(e, Validation)]
    assert [e.loss for e in two] == pytest.approx([e.loss for e in one], rel=1e-4)
    if HAS_TENSORBOARD:  # one log, by rank 0
        assert len(list((plan.run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
