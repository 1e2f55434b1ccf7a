"""The VRAM estimator: reference points, monotonicity, fit, and the data it reads."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import (
    estimate_vram,
    fit,
    load_architecture,
    load_calibration,
    lora_params,
    other_processes_warning,
)
from studio.core.hardware.machine.probe import load_hardware
from studio.core.hardware.report import GPUInfo

GB = 1024


def gpu(profile: str = "rtx4090-24gb") -> GPUInfo:
    return load_hardware(profile).gpus[0]


def config(family: str = "sd15", **sections: dict[str, Any]) -> TrainConfig:
    data: dict[str, Any] = {"model": {"family": family, "base": "models/base"}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return TrainConfig.model_validate(data)


def total_gb(cfg: TrainConfig, g: GPUInfo | None = None) -> float:
    return estimate_vram(cfg, g or gpu()).total_mb / GB


# ---------------------------------------------------------------- reference points of the issue

SD15_LORA = config("sd15", dataset={"resolution": 512},
                   training={"batch_size": 1, "mixed_precision": "fp16", "gradient_checkpointing": True})
SDXL_LORA = config("sdxl", dataset={"resolution": 1024},
                   training={"batch_size": 1, "mixed_precision": "fp16", "gradient_checkpointing": True,
                             "cache_text_embeddings": True, "optimizer": "adamw8bit"})
SDXL_FULL = config("sdxl", method={"kind": "dreambooth"}, dataset={"resolution": 1024},
                   training={"batch_size": 1, "mixed_precision": "bf16"})
SD3_LORA = config("sd3", model={"use_t5": False}, dataset={"resolution": 1024},
                  training={"batch_size": 1, "mixed_precision": "fp16", "gradient_checkpointing": True})


def test_sdxl_lora_reference() -> None:
    assert 8 <= total_gb(SDXL_LORA) <= 12


def test_sdxl_full_fine_tune_needs_more_than_24_gb() -> None:
    assert total_gb(SDXL_FULL) > 24
    assert fit(estimate_vram(SDXL_FULL, gpu()), gpu()) == "does_not_fit"


def test_sd3_lora_reference() -> None:
    # The fp32 VAE encoding a 1024 px image (2.5 GB, counted on the meta device) is SD3's peak here.
    assert 10 <= total_gb(SD3_LORA) <= 16


def test_sd15_lora_reference() -> None:
    # 4.10 GB measured on a GPU (resources/architectures/gpu_peaks.json); an earlier 6-10 GB range was wrong.
    assert 3.5 <= total_gb(SD15_LORA) <= 4.7



# ---------------------------------------------------------------- terms found for the GPU


def test_vae_stays_fp32_with_fp16_weights() -> None:
    # The studio's SD1.5 trainer and diffusers' SDXL/SD3 scripts keep the VAE in fp32 (fp16 overflows).
    vae_params = load_architecture("sd15")["components"]["vae"]["params"]
    assert estimate_vram(SD15_LORA, gpu()).vae_mb == pytest.approx(vae_params * 4 / 2**20)
    fixed = with_(SDXL_LORA, "model", vae="madebyollin/sdxl-vae-fp16-fix")
    assert estimate_vram(fixed, gpu()).vae_mb == pytest.approx(estimate_vram(SDXL_LORA, gpu()).vae_mb / 2)
    bf16 = with_(SD15_LORA, "model", dtype="bf16")
    assert estimate_vram(bf16, gpu()).vae_mb == pytest.approx(vae_params * 2 / 2**20)


def test_vae_encoding_is_the_sd3_peak_until_latents_are_cached() -> None:
    est = estimate_vram(SD3_LORA, gpu())
    # Five 128-channel 1024 px fp32 planes counted on the meta device, times what a GPU measured over the count.
    assert est.vae_encode_mb == pytest.approx(2560 * load_calibration()["gpu"]["vae_encode_factor"])
    assert any(p.key == "vae_encode" for p in est.parts)
    # Cached, the encoding leaves the steps for the caching phase, where the whole model is loaded.
    cached = estimate_vram(with_(SD3_LORA, "training", cache_latents=True), gpu())
    assert cached.training_peak_mb < est.training_peak_mb - 2048
    assert cached.caching_peak_mb == cached.total_mb > cached.training_peak_mb
    assert any("the caching phase is the peak" in n for n in cached.notes)
    assert [p.key for p in cached.parts][-1] == "caching"


def test_sd3_position_table_is_resident() -> None:
    den = load_architecture("sd3")["components"]["transformer"]
    assert den["float_buffers"] == 36_864 * 1_536
    assert estimate_vram(SD3_LORA, gpu()).weights_mb == pytest.approx((den["params"] + den["float_buffers"]) * 2 / 2**20)


def test_sample_images_can_be_the_peak() -> None:
    # bf16 keeps the VAE 16-bit, so caching latents is not the peak; whole 1024 px images are decoded.
    lean = with_(with_(SDXL_LORA, "training", cache_latents=True, mixed_precision="bf16"), "sampling", vae_tiling="off")
    sampling = with_(lean, "sampling", every_n_steps=100, prompts=["a photo of a cat"])
    est = estimate_vram(sampling, gpu())
    assert est.sampling_peak_mb > max(est.training_peak_mb, est.caching_peak_mb)
    assert est.total_mb == est.sampling_peak_mb and est.sampling_stage == "decoding with the VAE"
    assert any("sample images are the peak" in n for n in est.notes)
    assert [p.key for p in est.parts][-1] == "sampling"
    smaller = estimate_vram(with_(sampling, "sampling", size=512), gpu())
    assert smaller.sampling_peak_mb < est.sampling_peak_mb
    assert estimate_vram(lean, gpu()).sampling_peak_mb == 0
    # A prompt's own larger size is what is the peak, and the note says which picture.
    wide = estimate_vram(with_(sampling, "sampling", prompts=["a photo of a cat", "a cat --w 1536 --h 1024"]), gpu())
    assert wide.sampling_peak_mb > est.sampling_peak_mb
    assert any("for a 1536 x 1024 px image (a prompt's --w and --h)" in n and "a smaller --w and --h" in n
               for n in wide.notes), wide.notes


@pytest.mark.parametrize("family", ["sd15", "sdxl", "sd3"])
@pytest.mark.parametrize("gc", [False, True])
def test_activations_cover_the_counted_training_step(family: str, gc: bool) -> None:
    # The meta device counts the live bytes of a whole LoRA step under fp16 autocast; the
    # GPU-calibrated activation term must not be below it (an estimate that is low OOMs).
    arch = load_architecture(family)
    cfg = config(family, dataset={"resolution": arch["native_resolution"]},
                 training={"mixed_precision": "fp16", "gradient_checkpointing": gc, "cache_latents": True})
    counted = arch["transients_mb"][f"lora_step{'_checkpointing' if gc else ''}_mixed"]
    assert estimate_vram(cfg, gpu()).activations_mb >= counted


# ---------------------------------------------------------------- monotonicity

BASE = config("sdxl", dataset={"resolution": 768}, method={"rank": 16},
              training={"batch_size": 2, "mixed_precision": "bf16"})


def with_(cfg: TrainConfig, section: str, **values: Any) -> TrainConfig:
    data = cfg.model_dump()
    data[section].update(values)
    return TrainConfig.model_validate(data)


@pytest.mark.parametrize(("section", "key", "low", "high"), [
    ("training", "batch_size", 1, 4),
    ("dataset", "resolution", 512, 1024),
    ("method", "rank", 8, 128),
])
def test_grows_with(section: str, key: str, low: int, high: int) -> None:
    assert total_gb(with_(BASE, section, **{key: low})) < total_gb(with_(BASE, section, **{key: high}))


@pytest.mark.parametrize(("section", "values"), [
    ("training", {"gradient_checkpointing": True}),
    ("training", {"cache_text_embeddings": True}),
    ("training", {"cache_latents": True}),
    ("training", {"optimizer": "adamw8bit"}),
    ("model", {"dtype": "fp16"}),
])
def test_each_memory_option_lowers_the_estimate(section: str, values: dict[str, Any]) -> None:
    base = with_(BASE, "model", dtype="fp32")
    assert total_gb(with_(base, section, **values)) < total_gb(base)


@pytest.mark.parametrize("family", ["sd15", "sdxl", "sd3"])
def test_full_fine_tune_costs_more_than_lora(family: str) -> None:
    lora = config(family, training={"mixed_precision": "bf16"})
    full = config(family, method={"kind": "dreambooth"}, training={"mixed_precision": "bf16"})
    assert total_gb(full) > total_gb(lora) + 5


def test_breakdown_adds_up() -> None:
    est = estimate_vram(SDXL_LORA, gpu())
    assert est.total_mb == pytest.approx(sum(p.mb for p in est.parts), rel=1e-6)
    assert {p.key for p in est.parts} >= {"weights", "activations", "overhead", "optimizer", "gradients"}
    assert not any(p.key == "text_encoders" for p in est.parts)  # cached, so not resident


def test_t5_caching_peak_shows() -> None:
    cfg = config("sd3", model={"use_t5": True}, dataset={"resolution": 512},
                 training={"mixed_precision": "fp16", "gradient_checkpointing": True, "cache_text_embeddings": True})
    est = estimate_vram(cfg, gpu())
    assert est.caching_peak_mb > 9 * GB  # T5-XXL alone is ~9 GB in fp16
    assert est.total_mb == max(est.caching_peak_mb, est.training_peak_mb)


def test_cpu_mode_is_fp32() -> None:
    cpu = estimate_vram(SD15_LORA, None)
    assert cpu.device == "cpu"
    assert cpu.weights_mb == pytest.approx(859_520_964 * 4 / 2**20)
    assert estimate_vram(SD15_LORA, gpu()).weights_mb == pytest.approx(cpu.weights_mb / 2)


# ---------------------------------------------------------------- fit and warnings


def test_fit_thresholds() -> None:
    est = estimate_vram(SD15_LORA, gpu())
    g = GPUInfo(index=0, name="x", total_mb=int(est.total_mb / 0.95), free_mb=int(est.total_mb / 0.95))
    assert fit(est, g) == "tight"
    g.free_mb = g.total_mb = int(est.total_mb * 2)
    assert fit(est, g) == "fits"
    g.free_mb = int(est.total_mb * 0.9)
    assert fit(est, g) == "does_not_fit"  # other programs took the room


def test_warns_when_other_programs_hold_vram() -> None:
    g = gpu("rtx3060-12gb")
    assert other_processes_warning(g) is None  # a desktop's 400 MB is normal
    g.free_mb, g.other_processes_mb = 6000, 6288
    warning = other_processes_warning(g)
    assert warning is not None and "6.1 GB on GPU 0" in warning


def test_lora_size_follows_rank() -> None:
    targets = load_architecture("sd15")["components"]["unet"]["lora_targets"]
    # A rank-4 SD1.5 LoRA has 797,184 parameters (3.2 MB in fp32), as the community's files show.
    assert lora_params(targets, 4) == 797_184
    assert lora_params(targets, 8) == 2 * lora_params(targets, 4)


def test_edit_pairs_count_a_control_images_tokens_in_the_activations() -> None:
    """FLUX.2 [klein] reads a control's tokens beside the target's: an edit run saves twice the activations."""
    def activations_mb(kind: str) -> tuple[float, str]:
        cfg = config("flux2-klein", dataset={"resolution": 512, "kind": kind},
                     training={"batch_size": 1, "mixed_precision": "bf16", "gradient_checkpointing": True})
        part = next(p for p in estimate_vram(cfg, gpu()).parts if p.key == "activations")
        return part.mb, part.detail

    (plain, _), (edit, detail) = activations_mb("images"), activations_mb("edit")
    assert edit == pytest.approx(2 * plain) and "control image's tokens" in detail
