"""model.quantized_base in the estimate: the frozen denoiser's weights at int8 and nf4 sizes (the layers the
trainer keeps wide at theirs), one layer widened to run, and the quantizing in system memory."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram
from studio.core.estimate.ram.ram_estimate import estimate_ram
from studio.core.hardware.machine.probe import load_hardware

GPU = load_hardware("rtx4090-24gb").gpus[0]
MB = 2**20


def config(family: str, quantized: str, **training: Any) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"family": family, "base": "models/base", "quantized_base": quantized},
        "dataset": {"resolution": 1024},
        "training": {"mixed_precision": "bf16", "gradient_checkpointing": True, **training}})


# The weights part over the bf16 one. A transformer is all linear layers: int8 is a byte a weight (plus a
# 4-byte scale per row), nf4 half a byte plus an 8-bit absmax per 64 weights (0.516 byte). SDXL's UNet keeps
# 13% of its weights (its convolutions) in bf16.
RATIOS = {("qwen-image", "int8"): (0.500, 0.502), ("qwen-image", "nf4"): (0.258, 0.260),
          ("sdxl", "int8"): (0.565, 0.568), ("sdxl", "nf4"): (0.353, 0.356)}


@pytest.mark.parametrize(("family", "kind"), sorted(RATIOS))
def test_the_weights_part_shrinks_to_the_quantized_size(family: str, kind: str) -> None:
    full, quantized = estimate_vram(config(family, "none"), GPU), estimate_vram(config(family, kind), GPU)
    low, high = RATIOS[family, kind]
    assert low <= quantized.weights_mb / full.weights_mb <= high
    weights = next(p for p in quantized.parts if p.key == "weights")
    assert f"{kind} with" in weights.detail and ("(bitsandbytes)" in weights.detail) == (kind == "nf4")
    # One layer at a time is widened to bf16 while it runs; the step's peak falls by the weights saved.
    widened = next(p for p in quantized.parts if p.key == "quantized_widened")
    assert 0 < widened.mb < 200
    saved = full.weights_mb - quantized.weights_mb
    assert full.training_peak_mb - quantized.training_peak_mb == pytest.approx(saved - widened.mb, rel=0.05)


def test_a_20b_transformer_fits_a_24_gb_card_in_nf4_and_not_in_bf16() -> None:
    cached = {"cache_latents": True, "cache_text_embeddings": True}  # the 7B text encoder leaves the GPU
    full, int8, nf4 = (estimate_vram(config("qwen-image", kind, **cached), GPU) for kind in ("none", "int8", "nf4"))
    assert full.weights_mb / 1024 == pytest.approx(38.1, abs=0.1)
    assert int8.weights_mb / 1024 == pytest.approx(19.1, abs=0.1)
    assert nf4.weights_mb / 1024 == pytest.approx(9.85, abs=0.1)
    assert full.total_mb > 24 * 1024 > int8.total_mb > nf4.total_mb


def test_a_cpu_run_counts_the_quantized_base_too() -> None:
    full, int8 = estimate_vram(config("sd3", "none"), None), estimate_vram(config("sd3", "int8"), None)
    assert int8.weights_mb < 0.6 * full.weights_mb  # fp32 on the CPU: 4 bytes become about 1


def test_the_base_is_quantized_from_system_memory_and_counted_there() -> None:
    """Without caches the full-width base used to go straight to the GPU; quantized, it waits in system
    memory and its layers are quantized onto the GPU one at a time, so the RAM estimate has that phase (with
    the caches then filled) and the GPU never holds a full-width copy."""
    plain = estimate_ram(config("flux2-klein", "none"), GPU)
    assert "quantizing" not in plain.phases
    on_gpu = {kind: estimate_ram(config("flux2-klein", kind, cache_latents=True), GPU, images=100)
              for kind in ("int8", "nf4")}
    part = next(p for p in on_gpu["int8"].phase_parts["quantizing"] if p.key == "quantized_conversion")
    assert part.label == "Quantizing the denoiser to int8" and "into the GPU" in part.detail
    assert any(p.key == "latent_cache" for p in on_gpu["int8"].phase_parts["quantizing"])  # filled by then
    assert on_gpu["int8"].phases["quantizing"] == on_gpu["nf4"].phases["quantizing"]  # the layers leave
    # A CPU run keeps the quantized layers in system memory: nf4's are half of int8's.
    on_cpu = {kind: estimate_ram(config("flux2-klein", kind), None).phases["quantizing"] for kind in ("int8", "nf4")}
    assert on_cpu["nf4"] < on_cpu["int8"] - 1024
    assert estimate_vram(config("flux2-klein", "nf4"), GPU).caching_peak_mb == 0  # no cache: no caching phase


def test_the_fixes_offer_a_4_bit_base_where_8_bits_are_not_enough() -> None:
    from studio.core.estimate.plans.fixes import suggest_fixes

    data: dict[str, Any] = {
        "model": {"family": "qwen-image", "base": "models/base", "text_encoder_on_cpu": True},
        "dataset": {"resolution": 1024},
        "training": {"mixed_precision": "bf16", "gradient_checkpointing": True, "cache_latents": True,
                     "cache_text_embeddings": True}}
    sixteen = load_hardware("rtx4060ti-16gb").gpus[0]
    # Blocks in system memory keep the full quality: offered before 4 bits, after fp8.
    assert [s.key for s in suggest_fixes(TrainConfig.model_validate(data), sixteen)] == ["fp8_base", "blocks_to_swap"]
    data["training"]["compile"] = "blocks"  # compiled blocks cannot be swapped: 4 bits are the way down
    qwen = TrainConfig.model_validate(data)
    steps = suggest_fixes(qwen, sixteen)
    assert [s.key for s in steps] == ["nf4_base"]  # fp8 (19 GB of weights) alone is not enough: not kept
    assert steps[0].changes == {"model.fp8_base": False, "model.quantized_base": "nf4"}
    assert steps[0].fit != "does_not_fit" and "4 bits (nf4, bitsandbytes)" in steps[0].description
    assert suggest_fixes(qwen, GPU)[0].key == "fp8_base"  # on 24 GB the milder 8-bit base is enough
