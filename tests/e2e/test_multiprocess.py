"""`accelerate launch` with two CPU processes: two connected ranks that split the global batch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fixtures.waits import scaled_s

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import OutputSection, SamplingSection, TrainingSection
from studio.core.runs.events import Checkpoint, EpochSaved, RunFinished, RunStarted, Sample, Step
from studio.core.runs.launch import prepare_run

pytest.importorskip("torch")


@pytest.mark.slow
def test_two_cpu_ranks_train_one_model(make_config, events_of, tmp_path: Path) -> None:
    config = make_config(
        training=TrainingSection(batch_size=2, max_steps=4, learning_rate=1e-3, seed=1),
        sampling=SamplingSection(every_n_steps=4, prompts=["a red circle on a blue background"], steps=2),
        output=OutputSection(dir=str(tmp_path / "runs"), save_every_n_steps=2, save_every_n_epochs=1),
    )
    plan = prepare_run(resolve_paths(config, tmp_path), num_processes=2)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    result = subprocess.run(plan.command, env=env, capture_output=True, text=True, timeout=scaled_s(240))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    events = events_of(plan.run_dir)

    started = [e for e in events if isinstance(e, RunStarted)]
    assert len(started) == 1  # written once, by rank 0
    assert started[0].world_size == 2 and started[0].devices == ["cpu", "cpu"]
    assert started[0].effective_batch == 4
    steps = [e for e in events if isinstance(e, Step)]
    assert [s.step for s in steps] == [1, 2, 3, 4]
    assert [m.rank for m in steps[0].memory] == [0, 1] and all(m.rss_mb for m in steps[0].memory)
    # 8 images, 2 per rank and step: an epoch takes 2 steps (4 with one process).
    assert [s.epoch for s in steps] == [0, 0, 1, 1]
    assert [c.step for c in events if isinstance(c, Checkpoint)] == [2]
    # Epoch 1 ends at step 2: rank 0 writes its LoRA once while rank 1 waits.
    assert [(e.epoch, e.step) for e in events if isinstance(e, EpochSaved)] == [(1, 2)]
    assert (plan.run_dir / "output" / "epoch-0001" / "pytorch_lora_weights.safetensors").is_file()
    assert len([e for e in events if isinstance(e, Sample)]) == 1
    assert sorted(p.name for p in (plan.run_dir / "samples").iterdir()) == ["step-000004-0.png"]

    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed"
    checksums = finished.weight_checksums
    assert len(checksums) == 2 and checksums[0] == checksums[1]  # identical adapters on both ranks
    assert (plan.run_dir / "output" / "pytorch_lora_weights.safetensors").is_file()
    assert (plan.run_dir / "checkpoints" / "step-2" / "random_states_1.pkl").is_file()
