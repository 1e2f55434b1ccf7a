"""The per-GPU estimate of a sharded run: 1/N of the trained state, what FSDP gathers whole, DDP beside it."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.files.paths import NO_FOLDER, ResolvedConfig, resolve_paths
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram, load_architecture, load_calibration
from studio.core.estimate.plans.fixes import apply_suggestions, suggest_fixes
from studio.core.estimate.sharded.sharded_estimate import plan_gpus, with_strategy
from studio.core.hardware.machine.probe import load_hardware

MB = 2**20
PAIR = load_hardware("2x-rtx3090").gpus  # two 24 GB cards
NODE = load_hardware("8x-h100-80gb").gpus


def dreambooth(family: str = "sdxl", **training: Any) -> ResolvedConfig:
    return resolve_paths(TrainConfig.model_validate({
        "model": {"family": family, "base": "models/base", "dtype": "bf16"}, "method": {"kind": "dreambooth"},
        "dataset": {"resolution": 1024},
        "training": {"mixed_precision": "bf16", "gradient_checkpointing": True, "cache_latents": True,
                     "cache_text_embeddings": True, "optimizer": "adamw", **training},
    }), NO_FOLDER)


def part(estimate: Any, key: str) -> float:
    return sum(p.mb for p in estimate.parts if p.key == key)


@pytest.mark.parametrize("gpus", [2, 8])
def test_each_gpu_holds_its_share_of_the_trained_state(gpus: int) -> None:
    unet = load_architecture("sdxl")["components"]["unet"]
    params, adam = unet["params"], load_calibration()["optimizer_bytes_per_param"]["adamw"]
    one = estimate_vram(dreambooth(), PAIR[0])
    sharded = estimate_vram(with_strategy(dreambooth(), gpus, "fsdp"), PAIR[0])
    assert part(one, "weights") == pytest.approx(params * 4 / MB)
    assert part(sharded, "weights") == pytest.approx(params * 4 / gpus / MB)
    assert part(sharded, "gradients") == pytest.approx(params * 4 / gpus / MB)
    assert part(sharded, "optimizer") == pytest.approx(params * adam / gpus / MB)
    # What FSDP gathers whole: the root for the step, the running block and the next, in bf16.
    fsdp = unet["fsdp"]
    gathered = (fsdp["root_params"] + 2 * fsdp["largest_unit_params"]) * 2 / MB
    assert part(sharded, "fsdp_gathered") == pytest.approx(gathered)
    assert part(sharded, "fsdp_buffers") == pytest.approx(fsdp["largest_unit_params"] * 6 / MB)
    assert part(sharded, "weight_copies") == 0 < part(one, "weight_copies")  # gathered a unit at a time
    # The rest (activations, fixed costs) is the same per GPU.
    assert part(sharded, "activations") == part(one, "activations")


def test_data_parallel_keeps_everything_on_every_gpu_and_its_gradient_buckets() -> None:
    one = estimate_vram(dreambooth(), PAIR[0])
    ddp = estimate_vram(with_strategy(dreambooth(), 2, "ddp"), PAIR[0])
    assert part(ddp, "weights") == part(one, "weights")
    assert part(ddp, "gradients") == pytest.approx(2 * part(one, "gradients"))


def test_the_plan_for_two_24_gb_cards_proposes_fsdp() -> None:
    plan = plan_gpus(dreambooth(), PAIR[0], 2)
    assert plan.ddp_fit == "does_not_fit" and plan.ddp.total_gb > 40
    assert plan.fsdp is not None and plan.fsdp_fit in ("fits", "tight") and plan.fsdp.total_gb < 24
    assert plan.proposes_fsdp and plan.changes == {"launch.strategy": "fsdp", "launch.num_processes": 2}
    # On eight 80 GB cards DDP fits too: nothing to propose.
    assert not plan_gpus(dreambooth(), NODE[0], 8).proposes_fsdp


def test_a_lora_has_no_fsdp_plan_and_says_why() -> None:
    lora = resolve_paths(TrainConfig.model_validate({"model": {"family": "sdxl", "base": "m"}}), NO_FOLDER)
    plan = plan_gpus(lora, PAIR[0], 2)
    assert plan.fsdp is None and not plan.proposes_fsdp
    assert plan.fsdp_refused.startswith('launch.strategy = "fsdp": shards the weights a full fine-tune trains')


def test_before_sharding_every_gpu_loads_the_whole_model() -> None:
    # Eight ways, the step's share is small; loading the fp32 UNet beside the frozen parts is the peak.
    estimate = estimate_vram(with_strategy(dreambooth(), 8, "fsdp"), NODE[0])
    params = load_architecture("sdxl")["components"]["unet"]["params"]
    assert estimate.loading_peak_mb > params * 4 / MB > estimate.training_peak_mb
    assert estimate.total_mb == estimate.loading_peak_mb
    assert estimate.parts[-1].key == "loading" and "loading is the peak" in " ".join(estimate.notes)


def test_sharding_is_the_first_fix_on_a_machine_with_several_gpus() -> None:
    config = dreambooth(cache_latents=False, cache_text_embeddings=False)
    steps = suggest_fixes(config, PAIR[0], gpus=2)
    keys = [s.key for s in steps]
    assert "shard" in keys and set(keys) <= {"cache_text_embeddings", "cache_latents", "vae_tiling", "shard"}
    shard = steps[keys.index("shard")]
    assert shard.title == "Shard across 2 GPUs"
    assert shard.changes == {"launch.strategy": "fsdp", "launch.num_processes": 2}
    # It fits without any change that costs quality (8-bit Adam, lower resolution, a LoRA...).
    assert steps[-1].fit != "does_not_fit"
    assert apply_suggestions(config, steps).launch.strategy == "fsdp"
    # On one GPU there is nothing to shard across.
    assert "shard" not in [s.key for s in suggest_fixes(config, PAIR[0], gpus=1)]
