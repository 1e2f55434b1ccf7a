"""The low-VRAM knobs in the estimate: fp8 base weights, partial checkpointing, tiled and staged samples;
and every shipped preset keeping its promise with its samples on."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.files.paths import NO_FOLDER, resolve_paths
from studio.core.config.files.presets import list_presets
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram, load_architecture
from studio.core.estimate.memory_parts import run_facts
from studio.core.estimate.plans.preset_estimate import estimate_preset, preset_config, promised_gpu
from studio.core.estimate.sampling_plan import VAE_TILE_PX, sampling_needs_tiling, sampling_stages
from studio.core.estimate.sharded.sharded_estimate import plan_gpus
from studio.core.estimate.training_step import caching_peak, training_step
from studio.core.hardware.machine.probe import load_hardware

GPU = load_hardware("rtx4090-24gb").gpus[0]
SAMPLES = {"every_n_steps": 50, "prompts": ["a photo of a cat"]}


def config(family: str = "sdxl", **sections: dict[str, Any]) -> TrainConfig:
    data: dict[str, Any] = {"model": {"family": family, "base": "models/base"}, "dataset": {"resolution": 1024},
                            "training": {"mixed_precision": "bf16", "gradient_checkpointing": True}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return TrainConfig.model_validate(data)


# ---------------------------------------------------------------- fp8 base weights


def test_fp8_halves_the_frozen_denoiser() -> None:
    params = load_architecture("sdxl")["components"]["unet"]["params"]
    wide, narrow = estimate_vram(config(), GPU), estimate_vram(config(model={"fp8_base": True}), GPU)
    assert wide.weights_mb == pytest.approx(params * 2 / 2**20)
    assert narrow.weights_mb == pytest.approx(params / 2**20)
    # One layer widened to bf16 while it runs (SDXL's largest: 29.5 M weights).
    upcast = next(p for p in narrow.parts if p.key == "fp8_upcast")
    assert upcast.mb == pytest.approx(29_491_200 * 2 / 2**20)
    assert narrow.training_peak_mb < wide.training_peak_mb - 2000


def test_fp8_without_checkpointing_keeps_the_widened_copies_for_backward() -> None:
    # Autograd keeps the input of every layer's backward: the widened weight, unless the block is recomputed.
    plain = config(training={"mixed_precision": "bf16", "gradient_checkpointing": False})
    fp8 = estimate_vram(config(model={"fp8_base": True}, training={"gradient_checkpointing": False}), GPU)
    assert fp8.training_peak_mb >= estimate_vram(plain, GPU).training_peak_mb
    half = config(model={"fp8_base": True}, training={"checkpointing_interval": 2})
    upcast = next(p for p in estimate_vram(half, GPU).parts if p.key == "fp8_upcast")
    assert "50% of the layers" in upcast.detail


def test_fp8_is_a_gpu_knob() -> None:
    cpu = estimate_vram(config(model={"fp8_base": True}), None)
    assert cpu.weights_mb == estimate_vram(config(), None).weights_mb
    assert not any(p.key == "fp8_upcast" for p in cpu.parts)


# ---------------------------------------------------------------- partial checkpointing


def test_checkpointing_interval_lies_between_none_and_every_block() -> None:
    none = estimate_vram(config(training={"gradient_checkpointing": False, "cache_latents": True}), GPU)
    by_interval = [estimate_vram(config(training={"checkpointing_interval": n, "cache_latents": True}), GPU)
                   for n in (1, 2, 4)]
    activations = [e.activations_mb for e in by_interval]
    assert activations == sorted(activations) and activations[0] < activations[-1] < none.activations_mb
    # Every second block: halfway between every block and none.
    assert activations[1] == pytest.approx((activations[0] + none.activations_mb) / 2)
    detail = next(p.detail for p in by_interval[1].parts if p.key == "activations")
    assert detail.endswith("gradient checkpointing of one block in 2")


# ---------------------------------------------------------------- sample images


def test_tiled_decoding_caps_the_sample_peak() -> None:
    whole = estimate_vram(config(training={"cache_latents": True}, sampling={**SAMPLES, "vae_tiling": "off"}), GPU)
    tiled = estimate_vram(config(training={"cache_latents": True}, sampling={**SAMPLES, "vae_tiling": "on"}), GPU)
    assert whole.sampling_stage == "decoding with the VAE" and not whole.vae_tiling
    assert tiled.vae_tiling and tiled.sampling_peak_mb < whole.sampling_peak_mb - 2000
    # A sample no larger than one tile decodes the same either way.
    small = {**SAMPLES, "size": VAE_TILE_PX}
    assert estimate_vram(config(sampling={**small, "vae_tiling": "on"}), GPU).sampling_peak_mb == \
        estimate_vram(config(sampling={**small, "vae_tiling": "off"}), GPU).sampling_peak_mb


def test_auto_tiling_is_the_trainers_answer() -> None:
    auto = config(training={"cache_latents": True}, sampling=SAMPLES)
    assert sampling_needs_tiling(auto, GPU.total_mb) is True  # a 1024 px decode would top the steps
    assert estimate_vram(auto, GPU).vae_tiling is True
    small = config(dataset={"resolution": 512}, sampling=SAMPLES)
    assert sampling_needs_tiling(small, GPU.total_mb) is False  # one tile is the whole image
    assert sampling_needs_tiling(auto, 0) is False  # a CPU run decodes whole images
    assert sampling_needs_tiling(config(sampling={**SAMPLES, "vae_tiling": "on"}), 0) is True
    assert sampling_needs_tiling(config(sampling={**SAMPLES, "vae_tiling": "off"}), GPU.total_mb) is False


def test_cached_encoders_sample_in_stages_not_all_at_once() -> None:
    # With cached text the prompts were encoded with the captions: no encoder comes back for samples.
    # The VAE comes alone to decode: the sample's peak is its largest stage, not their sum.
    cfg = config(training={"cache_latents": True, "cache_text_embeddings": True},
                 sampling={**SAMPLES, "vae_tiling": "off"})
    facts = run_facts(cfg, "gpu")
    step = training_step(facts)
    stages = sampling_stages(facts, step, tiled=False)
    est = estimate_vram(cfg, GPU)
    assert stages.encode_prompts_mb == 0.0
    assert est.sampling_peak_mb == stages.decode_mb and est.sampling_stage == "decoding with the VAE"
    assert stages.decode_mb - step.peak_mb > 1000  # the VAE and its decode bring a gigabyte or more
    # Encoding at each sample (the encoders trained, so nothing is cached) brings the encoders back.
    trained = config(training={"cache_latents": True}, method={"train_text_encoder": True},
                     sampling={**SAMPLES, "vae_tiling": "off"})
    facts = run_facts(trained, "gpu")
    assert sampling_stages(facts, training_step(facts), tiled=False).encode_prompts_mb > 0


def test_an_edit_runs_samples_denoise_with_the_vae_that_encodes_their_control() -> None:
    # An edit's pipeline encodes the control image while it denoises: the VAE is on the GPU for that stage too.
    caches = {"cache_latents": True, "cache_text_embeddings": True}
    facts = {kind: run_facts(config("flux2-klein", dataset={"kind": kind}, training=caches,
                                    sampling={**SAMPLES, "vae_tiling": "off"}), "gpu") for kind in ("images", "edit")}
    step = training_step(facts["edit"])  # the same step: the stages differ by what samples bring
    edit, plain = (sampling_stages(facts[kind], step, tiled=False).denoise_mb for kind in ("edit", "images"))
    assert step.vae.weights_mb > step.mb("gradients")
    assert edit == pytest.approx(plain + step.vae.weights_mb - step.mb("gradients"))


def test_the_caching_phase_holds_the_encoders_and_the_vae_not_the_denoiser() -> None:
    # The trainer keeps the denoiser in system memory while the caches fill: the phase's peak is the
    # encoders, the VAE and the larger transient, whatever the denoiser weighs.
    cfg = config(training={"cache_latents": True, "cache_text_embeddings": True})
    facts = run_facts(cfg, "gpu")
    step = training_step(facts)
    expected = step.mb("overhead") + step.encoders.all_mb + step.vae.weights_mb
    assert step.mb("weights") > 4000  # the SDXL UNet in bf16, not in the caching phase
    held = caching_peak(facts, step)
    assert expected < held < expected + 4000  # plus the VAE's encode of a 1024 px batch
    # DreamBooth with prior preservation renders class images with the denoiser first: it stays.
    prior = config(training={"cache_latents": True, "cache_text_embeddings": True}, method={"kind": "dreambooth"},
                   dataset={"concepts": [{"path": "data", "class_path": "class", "class_prompt": "a dog",
                                          "prior_loss_weight": 1.0}]})
    facts = run_facts(prior, "gpu")
    step = training_step(facts)
    assert caching_peak(facts, step) > held + step.mb("weights") * 0.9


# ---------------------------------------------------------------- presets keep their promise


PRESETS = list_presets(include_user=False)


@pytest.mark.parametrize("preset", PRESETS, ids=[p.id for p in PRESETS])
def test_every_shipped_preset_keeps_its_promise_with_samples(preset: Any) -> None:
    # A preset made for several GPUs promises min_vram_gb on each of them, with its process count.
    result = estimate_preset(preset)
    assert result.gpu.total_mb == promised_gpu(preset).total_mb == int(preset.min_vram_gb * 1024)
    assert preset_config(preset).launch.num_processes == preset.gpus
    assert result.estimate.sampling_peak_mb > 0  # the samples are in the estimate
    assert result.keeps_promise, (f"{preset.id}: promises {preset.gpus} x {preset.min_vram_gb:g} GB, "
                                  f"estimated {result.estimate.total_gb:.2f} GB per GPU with samples")


MULTI_GPU = [p for p in PRESETS if p.gpus > 1]


@pytest.mark.parametrize("preset", MULTI_GPU, ids=[p.id for p in MULTI_GPU])
def test_a_multi_gpu_preset_needs_its_sharding(preset: Any) -> None:
    # Each shards its weights across its GPUs, and that is what keeps the promise: data parallel on the
    # same GPUs (a whole copy of the trained state on each) would not fit, or only tightly (within 10%).
    config = preset_config(preset)
    assert config.launch.strategy == "fsdp" and config.method.kind == "dreambooth"
    assert config.training.optimizer == "adamw" and config.dataset.resolution == 1024
    plan = plan_gpus(config, promised_gpu(preset), preset.gpus)
    assert plan.fsdp is not None and plan.fsdp.total_gb <= preset.min_vram_gb
    assert plan.ddp_fit != "fits" and plan.fsdp.total_gb < plan.ddp.total_gb
    # Where data parallel would not fit at all, the GPU plan proposes the sharding.
    assert plan.proposes_fsdp or plan.ddp_fit == "tight"


def test_sdxl_in_8_gb_with_its_samples() -> None:
    preset = next(p for p in PRESETS if p.id == "sdxl-lora-8gb")
    cfg = preset_config(preset)
    assert cfg.model.fp8_base and cfg.training.cache_latents and cfg.training.cache_text_embeddings
    assert cfg.sampling.every_n_steps and cfg.dataset.resolution == 1024 and cfg.method.rank <= 32
    result = estimate_preset(preset)
    assert result.estimate.total_gb <= 8
    assert result.summary() == f"promises 8 GB · estimated {result.estimate.total_gb:.1f} GB with samples"


def test_a_project_keeps_its_own_sample_settings() -> None:
    preset = next(p for p in PRESETS if p.id == "sd15-lora")
    project = resolve_paths(TrainConfig.model_validate({"model": {"family": "sd15", "base": "m"},
                                                        "sampling": {"every_n_steps": 25, "prompts": ["my dog"]}}),
                            NO_FOLDER)
    cfg = preset_config(preset, project)
    assert (cfg.sampling.every_n_steps, cfg.sampling.prompts) == (25, ["my dog"])


def test_samples_made_only_before_the_first_step_count_in_the_estimate() -> None:
    # Samples every 0 steps but at the start: the base model's pictures take the sampling peak all the same.
    at_start = estimate_vram(config(sampling={"every_n_steps": 0, "at_start": True, "prompts": ["a cat"],
                                              "vae_tiling": "off"}), GPU)
    assert at_start.sampling_stage == "decoding with the VAE" and at_start.sampling_peak_mb > 0
