"""A run on Z-Image Turbo draws its samples as Turbo is sampled (8 steps, no guidance) where the config names
none, and the pipeline makes them that way (no negative prompt is guided toward)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.runs.events import RunFinished, Sample

torch = pytest.importorskip("torch")


def test_a_turbo_run_samples_at_turbo_s_steps_and_guidance(tmp_path_factory, demo_data: Path, run_training,
                                                           events_of, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    from diffusers import ZImagePipeline

    from studio.train.pipelines.tiny import build_tiny_pipeline

    # The tiny Z-Image in a folder named as people name Turbo's download.
    base = build_tiny_pipeline("zimage", tmp_path_factory.mktemp("models") / "Z-Image-Turbo")
    asked: list[tuple[Any, Any]] = []
    call = ZImagePipeline.__call__

    def spied(self: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append((kwargs.get("num_inference_steps"), kwargs.get("guidance_scale")))
        return call(self, *args, **kwargs)

    monkeypatch.setattr(ZImagePipeline, "__call__", spied)
    config = TrainConfig.model_validate({
        "model": {"family": "zimage", "base": str(base)},
        "dataset": {"concepts": [{"path": str(demo_data)}], "resolution": 64, "buckets": False},
        "training": {"batch_size": 2, "max_steps": 1, "learning_rate": 1e-3, "seed": 1},
        "sampling": {"every_n_steps": 1, "prompts": ["a red circle"]},  # no steps, no guidance
        "output": {"dir": str(tmp_path / "runs"), "formats": ["diffusers"]},
    })
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0, events[-3:]
    assert asked == [(8, 0.0)]
    (sample,) = [e for e in events if isinstance(e, Sample)]
    assert Path(sample.images[0]).is_file()
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
