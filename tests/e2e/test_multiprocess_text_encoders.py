"""`accelerate launch` with two CPU processes training text encoders: an SDXL DreamBooth with both encoders, and an
SD1.5 LoRA on its encoder with model.clip_skip = 2. Both once failed on several GPUs: the layers after the hidden
state the family reads got no gradient (refused at the second step), and clip_skip read the encoder's config
through the data-parallel wrapper (an AttributeError at the first)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.training import train_in_one_launch

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    ModelSection,
    OutputSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.runs.events import RunFinished, Step
from studio.core.runs.launch import prepare_run

pytest.importorskip("torch")

CASES = {"sdxl-dreambooth": ("sdxl", "dreambooth", 1), "sd15-lora-clip-skip": ("sd15", "lora", 2)}


@pytest.mark.slow
def test_two_cpu_ranks_train_text_encoders(demo_data: Path, events_of, tmp_path: Path) -> None:
    from studio.train.pipelines.tiny import build_tiny_pipeline

    runs = {}
    for case, (family, kind, clip_skip) in CASES.items():
        base = build_tiny_pipeline(family, tmp_path / "models" / family)
        config = TrainConfig(
            model=ModelSection(family=family, base=str(base), clip_skip=clip_skip),
            method=MethodSection(kind=kind, train_text_encoder=True),  # type: ignore[arg-type]
            dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
            training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1),
            output=OutputSection(dir=str(tmp_path / case), formats=["diffusers"], save_precision="fp32"),
        )
        runs[case] = prepare_run(resolve_paths(config, tmp_path), num_processes=2).run_dir
    train_in_one_launch(list(runs.values()), "the two 2-rank text-encoder runs")
    for case, run_dir in runs.items():
        events = events_of(run_dir)
        assert [s.step for s in events if isinstance(s, Step)] == [1, 2], case
        finished = events[-1]
        assert isinstance(finished, RunFinished) and finished.status == "completed", case
        assert len(finished.weight_checksums) == 2 and finished.weight_checksums[0] == finished.weight_checksums[1]
