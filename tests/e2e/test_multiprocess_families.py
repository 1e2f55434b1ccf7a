"""`accelerate launch` with two CPU processes for SDXL, SD3, FLUX.2 [klein], Z-Image and Qwen-Image: both ranks end
with the same adapter, over a quantized base too (each rank quantizes its own; SD3 over int8) and with blocks
swapped to system memory ([klein] over nf4 with two blocks swapped and gradient checkpointing: each rank keeps
its own swapped blocks, and data parallelism leaves them alone).

The five runs share one launch (tests/fixtures/sharded_runs.py: each run through a fresh Accelerator and the
Trainer, one after the other), built once for both test workers: a launch per family spent about 20 s of CPU
starting two ranks. `studio.train`'s own start and end on two ranks are tested in test_multiprocess.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.training import train_in_one_launch

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    ModelSection,
    OutputSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.runs.events import RunFinished, RunStarted, Step
from studio.core.runs.launch import prepare_run

pytest.importorskip("torch")

CASES: dict[str, tuple[str, dict[str, object]]] = {
    "sdxl": ("sdxl", {}),
    "sd3-int8": ("sd3", {"quantized_base": "int8"}),
    "zimage": ("zimage", {}),
    "qwen-image": ("qwen-image", {}),
    "flux2-klein-nf4-swapped": ("flux2-klein", {"quantized_base": "nf4", "blocks_to_swap": 2}),
}


def _launch_all(root: Path, data: Path) -> Path:
    """Every case's run prepared for two ranks and trained in one launch; the folder of run folders."""
    from studio.train.pipelines.tiny import build_tiny_pipeline

    runs = []
    for case, (family, model) in CASES.items():
        base = build_tiny_pipeline(family, root / "models" / f"tiny-{family}")
        config = TrainConfig(
            model=ModelSection(family=family, base=str(base), **model),  # type: ignore[arg-type]
            dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=64, buckets=False),
            training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1,
                                     gradient_checkpointing="blocks_to_swap" in model),
            output=OutputSection(dir=str(root / case), formats=["diffusers"]),
        )
        runs.append(prepare_run(resolve_paths(config, root), num_processes=2).run_dir)
    train_in_one_launch(runs, "the five 2-rank runs")
    return root


@pytest.fixture(scope="module")
def two_rank_runs(demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fixtures.built_once import built_once

    return built_once(tmp_path_factory, "two-rank-family-runs", lambda folder: _launch_all(folder, demo_data))


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_two_cpu_ranks_train_one_adapter(case: str, two_rank_runs: Path, events_of) -> None:
    [run_dir] = [p for p in (two_rank_runs / case).iterdir() if p.is_dir()]
    events = events_of(run_dir)
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.world_size == 2 and started.effective_batch == 4
    assert [s.step for s in events if isinstance(s, Step)] == [1, 2]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed"
    checksums = finished.weight_checksums
    assert len(checksums) == 2 and checksums[0] == checksums[1]  # identical adapters on both ranks
    assert (run_dir / "output" / "pytorch_lora_weights.safetensors").is_file()
