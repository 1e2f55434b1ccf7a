"""The estimate counts model.blocks_to_swap: the GPU holds the swapped blocks' weights no more (but two of them
on their way), system memory holds them pinned, and the note says what the copies cost a step."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.files.paths import NO_FOLDER, resolve_paths
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram
from studio.core.estimate.memory_data import MB, denoiser_entry, load_architecture
from studio.core.estimate.ram.ram_estimate import estimate_ram
from studio.core.hardware.machine.probe import load_hardware

GPU = load_hardware("rtx4090-24gb").gpus[0]
KLEIN_9B = "black-forest-labs/FLUX.2-klein-base-9B"


def _config(family: str, base: str, swapped: int, **model: Any) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"family": family, "base": base, "blocks_to_swap": swapped, **model},
        "dataset": {"resolution": 1024, "concepts": [{"path": "images"}]},
        "training": {"mixed_precision": "bf16", "gradient_checkpointing": True}})


def _block_mb(architecture: str, width: int) -> tuple[float, float]:
    """(an average block, the largest block) of the published architecture, in MiB at `width` bytes."""
    den = denoiser_entry(load_architecture(architecture))
    average = (den["params"] - den["fsdp"]["root_params"]) / den["blocks"]
    return average * width / MB, den["fsdp"]["largest_unit_params"] * width / MB


@pytest.mark.parametrize(("family", "base", "architecture", "swapped", "fp8"), [
    ("flux2-klein", KLEIN_9B, "flux2-klein-9b", 8, False),
    ("flux2-klein", KLEIN_9B, "flux2-klein-9b", 8, True),
    ("zimage", "Tongyi-MAI/Z-Image", "zimage", 12, False),
    ("qwen-image", "Qwen/Qwen-Image", "qwen-image", 40, False),
])
def test_swapped_blocks_leave_the_gpu_for_pinned_system_memory(family: str, base: str, architecture: str,
                                                              swapped: int, fp8: bool) -> None:
    width = 1 if fp8 else 2
    block, largest = _block_mb(architecture, width)
    plain, swap = (_config(family, base, n, fp8_base=fp8) for n in (0, swapped))
    vram_plain, vram_swap = estimate_vram(plain, GPU), estimate_vram(swap, GPU)
    # The weights part loses the swapped blocks; two of the largest come back while they run.
    assert vram_plain.weights_mb - vram_swap.weights_mb == pytest.approx(swapped * block, rel=1e-6)
    lower = vram_plain.training_peak_mb - vram_swap.training_peak_mb
    assert lower == pytest.approx(swapped * block - 2 * largest, rel=1e-6)
    assert lower > 0.5 * swapped * block
    on_their_way = next(p for p in vram_swap.parts if p.key == "swap_in_flight")
    assert on_their_way.mb == pytest.approx(2 * largest) and "2 of the" in on_their_way.detail
    note = next(n for n in vram_swap.notes if n.startswith("model.blocks_to_swap"))
    assert f"{swapped} blocks" in note and " s a step at 12 GB/s" in note
    assert not any(n.startswith("model.blocks_to_swap") for n in vram_plain.notes)

    ram_plain = estimate_ram(resolve_paths(plain, NO_FOLDER), GPU, images=20)
    ram_swap = estimate_ram(resolve_paths(swap, NO_FOLDER), GPU, images=20)
    assert ram_swap.phases["training"] - ram_plain.phases["training"] == pytest.approx(swapped * block, rel=1e-6)
    pinned = next(p for p in ram_swap.phase_parts["training"] if p.key == "swapped_blocks")
    assert "pinned" in pinned.detail


def test_the_copy_time_grows_with_the_blocks_and_the_micro_batches() -> None:
    def seconds(swapped: int, accumulation: int) -> float:
        config = _config("qwen-image", "Qwen/Qwen-Image", swapped)
        config.training.gradient_accumulation = accumulation
        note = next(n for n in estimate_vram(config, GPU).notes if n.startswith("model.blocks_to_swap"))
        return float(note.split("add up to ")[1].split(" s ")[0])

    block, _ = _block_mb("qwen-image", 2)
    # Twice across the bus per micro-batch (forward, backward) at 12 GB/s.
    assert seconds(20, 1) == pytest.approx(2 * 20 * block * MB / 12e9, abs=0.01)
    assert seconds(40, 1) == pytest.approx(2 * seconds(20, 1), abs=0.02)
    assert seconds(20, 2) == pytest.approx(2 * seconds(20, 1), abs=0.02)


def test_a_cpu_run_is_estimated_as_it_was() -> None:
    plain, swap = (_config("sd3", "stabilityai/stable-diffusion-3-medium-diffusers", n) for n in (0, 6))
    assert estimate_vram(swap, None).total_mb == estimate_vram(plain, None).total_mb


def test_a_transformer_lora_that_does_not_fit_is_offered_the_mildest_swap_that_does() -> None:
    from studio.core.estimate.estimate import fit
    from studio.core.estimate.plans.fixes import suggest_fixes

    config = resolve_paths(TrainConfig.model_validate({
        "model": {"family": "qwen-image", "base": "Qwen/Qwen-Image", "fp8_base": True, "text_encoder_on_cpu": True},
        "dataset": {"resolution": 640, "concepts": [{"path": "images"}]},
        "training": {"mixed_precision": "bf16", "gradient_checkpointing": True, "optimizer": "adamw8bit",
                     "cache_latents": True, "cache_text_embeddings": True}}), NO_FOLDER)
    small = load_hardware("rtx3060-12gb").gpus[0]
    steps = suggest_fixes(config, small)
    swap = next(s for s in steps if s.key == "blocks_to_swap")
    count = swap.changes["model.blocks_to_swap"]
    assert count in (15, 30, 45, 58) and f"{count} of the 60 transformer blocks" in swap.description
    assert swap.saved_mb > 5 * 1024  # GBs of fp8 weights off the card
    assert steps[-1] is swap and fit(swap.estimate, small) != "does_not_fit"
    # A sd15 LoRA has no blocks to swap: never offered.
    unet = resolve_paths(TrainConfig.model_validate({"model": {"family": "sdxl", "base": "b"},
                                                      "dataset": {"resolution": 1024, "concepts": [{"path": "i"}]},
                                                      "training": {"batch_size": 8}}), NO_FOLDER)
    assert all(s.key != "blocks_to_swap" for s in suggest_fixes(unet, small))


def test_a_smaller_model_of_the_family_swaps_blocks_of_its_own_size() -> None:
    import copy

    from studio.core.estimate.block_swap_parts import swap_figures
    from studio.core.estimate.memory_parts import run_facts

    facts = run_facts(_config("zimage", "Tongyi-MAI/Z-Image", 10), "gpu")
    full = swap_figures(facts)
    arch = copy.deepcopy(facts.arch)  # as local_architecture sizes a model folder a tenth the size
    den = denoiser_entry(arch)
    arch["local_model"] = {"name": "small", "denoiser_params": den["params"] // 10, "published_params": den["params"]}
    den["params"] //= 10
    facts.arch = arch
    small = swap_figures(facts)
    assert full is not None and small is not None
    assert small.kept_mb == pytest.approx(full.kept_mb / 10, rel=1e-3)
    assert small.in_flight_mb == pytest.approx(full.in_flight_mb / 10, rel=1e-3)


def test_a_machine_short_of_ram_is_told_to_swap_no_blocks() -> None:
    from studio.core.estimate.ram.ram_estimate import ram_fixes

    swapped = _config("qwen-image", "Qwen/Qwen-Image", 50)
    swapped.training.cache_text_embeddings = True  # the text encoder waits in system memory too
    config = resolve_paths(swapped, NO_FOLDER)
    estimate = estimate_ram(config, GPU, images=20)
    assert estimate.phase == "training"  # 50 blocks pinned beside the parked encoder outweigh loading the model
    fix = next(f for f in ram_fixes(config, GPU, estimate) if "model.blocks_to_swap" in f.changes)
    assert fix.changes == {"model.blocks_to_swap": 0} and "model.blocks_to_swap = 0" in fix.words
    assert fix.total_mb < estimate.total_mb - 5 * 1024  # down to loading the model, the next largest phase
