"""sampling.vae_tiling: the one rule (sampling_plan.sampling_needs_tiling) the trainer and the estimate share."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.files.presets import apply_preset, get_preset
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram
from studio.core.estimate.sampling_plan import sampling_needs_tiling
from studio.core.hardware.report import GPUInfo

SAMPLES: dict[str, Any] = {"every_n_steps": 100, "prompts": ["a photo of sks dog"]}


def config(family: str = "sdxl", preset: str | None = None, **sections: dict[str, Any]) -> TrainConfig:
    data: dict[str, Any] = {"model": {"family": family, "base": "models/base"}, "sampling": dict(SAMPLES)}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    made = TrainConfig.model_validate(data)
    if preset:  # a preset's own sampling cadence is none: samples as a person turns them on
        made = apply_preset(made, get_preset(preset))
        made.sampling.every_n_steps = SAMPLES["every_n_steps"]
    return made


@pytest.mark.parametrize("mode", ["on", "off"])
def test_on_and_off_are_obeyed_everywhere(mode: str) -> None:
    for gpu in (0, 8192, 81920):
        assert sampling_needs_tiling(config(sampling={"vae_tiling": mode}), gpu) is (mode == "on")


def test_auto_never_tiles_a_cpu_run() -> None:
    made = config(preset="sdxl-lora-8gb")
    made.sampling.vae_tiling = "auto"
    assert sampling_needs_tiling(made, 8192) and not sampling_needs_tiling(made, 0)


def test_auto_tiles_a_1024_px_sdxl_run_with_checkpointing_and_not_a_roomy_sd15_run() -> None:
    tight = config(model={"dtype": "bf16"}, training={"gradient_checkpointing": True, "cache_latents": True,
                                                      "cache_text_embeddings": True, "mixed_precision": "bf16"},
                   dataset={"resolution": 1024})
    assert sampling_needs_tiling(tight, 8192)
    # SD1.5 at 512 px: a sample is one tile, nothing to tile.
    assert not sampling_needs_tiling(config("sd15", preset="sd15-lora"), 8192)


def test_the_trainer_and_the_estimate_give_the_same_answer() -> None:
    for made in (config(preset="sdxl-lora-8gb"), config("sd15", preset="sd15-lora"), config("sd3", preset="sd3-lora")):
        made.sampling.vae_tiling = "auto"
        gpu = GPUInfo(index=0, name="GPU", total_mb=8192, free_mb=8192)
        assert estimate_vram(made, gpu).vae_tiling is sampling_needs_tiling(made, 8192)


def test_a_prompts_own_larger_size_counts_in_the_samples_memory() -> None:
    gpu = GPUInfo(index=0, name="GPU", total_mb=81920, free_mb=81920)
    square = config("sd15", sampling={"vae_tiling": "off"}, dataset={"resolution": 512})
    wide = config("sd15", sampling={"vae_tiling": "off", "prompts": ["a photo of sks dog",
                                                                    "a photo of sks dog --w 1536 --h 1024"]},
                  dataset={"resolution": 512})
    assert estimate_vram(wide, gpu).sampling_peak_mb > estimate_vram(square, gpu).sampling_peak_mb * 1.5
    # The tiling rule sees the larger picture too: it is no longer one tile.
    wide.sampling.vae_tiling = square.sampling.vae_tiling = "auto"
    assert sampling_needs_tiling(wide, 4096) and not sampling_needs_tiling(square, 4096)
