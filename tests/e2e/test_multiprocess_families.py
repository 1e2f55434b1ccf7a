"""`accelerate launch` with two CPU processes for SDXL, SD3, FLUX.2 [klein], Z-Image and Qwen-Image: both ranks end
with the same adapter, over a quantized base too (each rank quantizes its own; SD3 over int8) and with blocks
swapped to system memory ([klein] over nf4 with two blocks swapped and gradient checkpointing: each rank keeps
its own swapped blocks, and data parallelism leaves them alone)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fixtures.waits import scaled_s

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import ModelSection, OutputSection, TrainingSection
from studio.core.runs.events import RunFinished, RunStarted, Step
from studio.core.runs.launch import prepare_run

pytest.importorskip("torch")


@pytest.mark.slow
@pytest.mark.parametrize(("family", "model"), [
    ("sdxl", {}), ("sd3", {"quantized_base": "int8"}), ("zimage", {}), ("qwen-image", {}),
    ("flux2-klein", {"quantized_base": "nf4", "blocks_to_swap": 2})], ids=["sdxl", "sd3-int8", "zimage", "qwen-image",
                                                                        "flux2-klein-nf4-swapped"])
def test_two_cpu_ranks_train_one_adapter(family: str, model: dict[str, object], make_config, events_of,
                                         tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from studio.train.pipelines.tiny import build_tiny_pipeline

    base = build_tiny_pipeline(family, tmp_path_factory.mktemp("models") / f"tiny-{family}")
    config = make_config(
        model=ModelSection(family=family, base=str(base), **model),  # type: ignore[arg-type]
        training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1,
                                 gradient_checkpointing="blocks_to_swap" in model),
        output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers"]),
    )
    plan = prepare_run(resolve_paths(config, tmp_path), num_processes=2)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    try:
        result = subprocess.run(plan.command, env=env, capture_output=True, text=True, timeout=scaled_s(180))
    except subprocess.TimeoutExpired as exc:
        events = plan.run_dir / "events.jsonl"
        tail = events.read_text(encoding="utf-8")[-2000:] if events.is_file() else "(no events)"
        pytest.fail(f"the 2-rank {family} run did not finish in 180 s; events: {tail}\n"
                    f"output: {str(exc.stdout or '')[-2000:]}\n{str(exc.stderr or '')[-2000:]}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    events = events_of(plan.run_dir)
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.world_size == 2 and started.effective_batch == 4
    assert [s.step for s in events if isinstance(s, Step)] == [1, 2]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed"
    checksums = finished.weight_checksums
    assert len(checksums) == 2 and checksums[0] == checksums[1]  # identical adapters on both ranks
    assert (plan.run_dir / "output" / "pytorch_lora_weights.safetensors").is_file()
