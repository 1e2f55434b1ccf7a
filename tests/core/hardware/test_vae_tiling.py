"""sampling.vae_tiling: the one rule the trainer and the estimate share for tiled sample decoding."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.presets import apply_preset, get_preset
from studio.core.config.schema import TrainConfig
from studio.core.hardware.vae_tiling import (
    TILE_PX,
    decode_needs_tiling,
    sampling_needs_tiling,
    vae_decode_mb,
    vae_weights_mb,
)

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
    for gpu in (None, 8192.0, 81920.0):
        assert sampling_needs_tiling(config(sampling={"vae_tiling": mode}), gpu) is (mode == "on")


def test_auto_never_tiles_a_cpu_run_or_a_run_without_samples() -> None:
    assert not sampling_needs_tiling(config(preset="sdxl-lora-8gb"), None)
    no_samples = config(preset="sdxl-lora-8gb")
    no_samples.sampling.every_n_steps = 0
    assert not sampling_needs_tiling(no_samples, 8192.0)


def test_auto_tiles_the_8gb_sdxl_preset_at_1024_px_and_not_a_roomy_sd15_run() -> None:
    # Whole 1024 px decodes need more than a checkpointed step's activations: tiled.
    assert sampling_needs_tiling(config(preset="sdxl-lora-8gb"), 8192.0)
    # SD1.5 at 512 px without checkpointing: the step's activations dwarf the decode.
    assert not sampling_needs_tiling(config("sd15", preset="sd15-lora"), 8192.0)


def test_the_rule_compares_the_decode_with_what_a_step_holds() -> None:
    cached = config(preset="sdxl-lora-8gb")
    whole = vae_decode_mb(cached, tiled=False) + vae_weights_mb(cached)  # the VAE comes back for samples
    assert decode_needs_tiling(cached, whole - 1) and not decode_needs_tiling(cached, whole + 1)
    resident = config(training={"cache_latents": False})  # the VAE never leaves: only the decode counts
    assert not decode_needs_tiling(resident, vae_decode_mb(resident, tiled=False) + 1)


def test_a_tile_costs_what_a_512_px_decode_costs() -> None:
    big = config(sampling={"size": 1024})
    assert vae_decode_mb(big, tiled=True) == pytest.approx(vae_decode_mb(big, tiled=False) * (TILE_PX / 1024) ** 2)
    small = config(sampling={"size": 512})
    assert vae_decode_mb(small, tiled=True) == vae_decode_mb(small, tiled=False)
    # The SDXL VAE stays fp32 under fp16 (it overflows), unless a fp16-safe one is given.
    fp16 = config(model={"dtype": "fp16"})
    assert vae_decode_mb(fp16, tiled=False) == 2 * vae_decode_mb(config(model={"dtype": "bf16"}), tiled=False)
    fixed = config(model={"dtype": "fp16", "vae": "madebyollin/sdxl-vae-fp16-fix"})
    assert vae_weights_mb(fixed) == vae_weights_mb(fp16) / 2
