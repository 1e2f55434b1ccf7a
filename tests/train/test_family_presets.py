"""Every shipped SDXL and SD3 preset trains a tiny pipeline, changing only what a CPU cannot do."""

from __future__ import annotations

import pytest

from studio.core.config.presets import apply_preset, list_presets
from studio.core.runs.events import RunFinished

pytest.importorskip("torch")

PRESETS = [p for p in list_presets(include_user=False) if p.family in ("sdxl", "sd3")]


def test_there_are_sdxl_and_sd3_presets() -> None:
    assert {p.family for p in PRESETS} == {"sdxl", "sd3"}
    assert {p.method for p in PRESETS} == {"lora", "dreambooth"}


@pytest.mark.parametrize("preset", PRESETS, ids=[p.id for p in PRESETS])
def test_preset_trains_a_tiny_pipeline(preset, make_config, run_training, events_of, tmp_path) -> None:
    config = apply_preset(make_config(preset.family), preset)
    # Only what a CPU run needs: no GPU precision, no bitsandbytes, small pictures, two steps.
    config.training.mixed_precision = "no"
    if config.training.optimizer == "adamw8bit":
        config.training.optimizer = "adamw"
    config.dataset.resolution = 64
    config.training.max_steps = 2
    config.training.epochs = None
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0, [e for e in events if e.type in ("error", "warning")]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == 2
    assert finished.outputs
