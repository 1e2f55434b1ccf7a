"""SD3: flow-matching LoRA (block selection, both CLIP encoders) and DreamBooth runs, outputs that
StableDiffusion3Pipeline loads, learning on the shapes, the noise recipe, T5 on and off."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from fixtures.hub_layout import assert_folder_in_hub_layout, assert_lora_in_hub_layout
from fixtures.training import train_in_process
from safetensors import safe_open

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.dataset.demo_shapes import write_demo_dataset
from studio.core.runs.events import Error, RunFinished

torch = pytest.importorskip("torch")

PROMPT = "a red circle on a blue background"
# Pipelines saved without T5 load as SD3 without T5 does: by saying so.
NO_T5 = {"text_encoder_3": None, "tokenizer_3": None}


def _keys(path: Path) -> list[str]:
    with safe_open(str(path), "pt") as handle:
        return list(handle.keys())


@pytest.fixture(scope="module")
def lora_run(tiny_sd3: Path, demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:

    root = tmp_path_factory.mktemp("sd3-lora")
    config = TrainConfig(
        model=ModelSection(family="sd3", base=str(tiny_sd3)),
        method=MethodSection(kind="lora", rank=4, alpha=8, train_text_encoder=True, blocks=[1]),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=4, learning_rate=5e-3, seed=3, loss_weighting="cosmap"),
        sampling=SamplingSection(every_n_steps=4, prompts=[PROMPT], steps=2),
        output=OutputSection(dir=str(root / "runs"), name="shapes-3"),
    )
    code, run_dir = train_in_process(config, root)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    return run_dir


def test_lora_run_trains_only_the_chosen_blocks(lora_run: Path, events_of) -> None:
    finished = events_of(lora_run)[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed"
    keys = _keys(lora_run / "output" / "pytorch_lora_weights.safetensors")
    transformer = [k for k in keys if k.startswith("transformer.")]
    assert transformer and all(k.startswith("transformer.transformer_blocks.1.attn.") for k in transformer)
    assert any(".add_q_proj." in k for k in transformer)  # the text stream's projections too
    assert any(k.startswith("text_encoder.") for k in keys) and any(k.startswith("text_encoder_2.") for k in keys)
    kohya = _keys(lora_run / "output" / "shapes-3.safetensors")
    assert any(k.startswith("lora_transformer_transformer_blocks_1_attn_") for k in kohya)


def test_kohya_file_names_its_architecture_as_sd_scripts_does(lora_run: Path) -> None:
    with safe_open(str(lora_run / "output" / "shapes-3.safetensors"), "pt") as handle:
        meta = handle.metadata()
    assert meta["modelspec.architecture"] == "stable-diffusion-3-medium/lora"
    assert meta["modelspec.implementation"] == "diffusers" and meta["modelspec.resolution"] == "64x64"
    assert meta["modelspec.prediction_type"] == "flow"  # flow matching, as its declaration says


def test_diffusers_file_names_modules_as_the_published_checkpoint(lora_run: Path) -> None:
    path = lora_run / "output" / "pytorch_lora_weights.safetensors"
    assert_lora_in_hub_layout(path, "sd3", {"transformer", "text_encoder", "text_encoder_2"})


def _image(pipe, seed: int = 5) -> np.ndarray:
    out = pipe(PROMPT, num_inference_steps=2, height=64, width=64, guidance_scale=5.0,
               generator=torch.Generator("cpu").manual_seed(seed), output_type="np")
    return np.asarray(out.images[0])


def test_lora_loads_into_the_sd3_pipeline_and_changes_the_image(lora_run: Path, tiny_sd3: Path) -> None:
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline.from_pretrained(str(tiny_sd3), **NO_T5)
    pipe.set_progress_bar_config(disable=True)
    base = _image(pipe)
    pipe.load_lora_weights(str(lora_run / "output"), weight_name="pytorch_lora_weights.safetensors")
    assert np.abs(_image(pipe) - base).max() > 1e-3
    pipe.unload_lora_weights()
    assert np.allclose(_image(pipe), base, atol=1e-6)


def test_dreambooth_output_loads_and_differs(make_config, run_training, events_of, tiny_sd3, tmp_path) -> None:
    from diffusers import StableDiffusion3Pipeline

    config = make_config("sd3", method=MethodSection(kind="dreambooth"),
                         training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), save_precision="fp32"))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, events_of(run_dir)
    assert {"transformer", "text_encoder", "text_encoder_2"} <= set(
        assert_folder_in_hub_layout(run_dir / "output", "sd3"))
    tuned = StableDiffusion3Pipeline.from_pretrained(str(run_dir / "output"), **NO_T5)
    base = StableDiffusion3Pipeline.from_pretrained(str(tiny_sd3), **NO_T5)
    for pipe in (tuned, base):
        pipe.set_progress_bar_config(disable=True)
    assert np.abs(_image(tuned) - _image(base)).max() > 1e-3


def test_flow_matching_loss_falls_on_the_shapes(make_config, run_training, held_out_loss, tmp_path) -> None:
    held_out = tmp_path / "held-out"
    write_demo_dataset(held_out, count=8, size=64, seed=99)
    config = make_config(
        "sd3", method=MethodSection(kind="lora", rank=8),
        training=TrainingSection(batch_size=4, max_steps=30, learning_rate=1e-2, seed=2, lr_scheduler="constant",
                                 cache_latents=True, cache_text_embeddings=True),
    )
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    before = held_out_loss(config, held_out, None)
    after = held_out_loss(config, held_out, run_dir / "output")
    print(f"held-out flow-matching loss {before:.4f} -> {after:.4f}")
    assert after < 0.8 * before


@pytest.mark.parametrize("sampling", ["logit_normal", "mode", "uniform"])
def test_timestep_sampling_and_loss_weighting(tiny_sd3: Path, sampling: str) -> None:
    from diffusers import FlowMatchEulerDiscreteScheduler

    from studio.train.families.schemes import FlowMatchingScheme

    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(str(tiny_sd3), subfolder="scheduler")
    latents = torch.randn(512, 16, 2, 2)
    schemes = {w: FlowMatchingScheme(scheduler, TrainingSection(timestep_sampling=sampling, loss_weighting=w))
               for w in ("none", "sigma_sqrt", "cosmap")}
    noised = {w: s.noise(latents, torch.Generator().manual_seed(0)) for w, s in schemes.items()}
    timesteps = noised["none"].timesteps
    assert float(timesteps.min()) > 0 and float(timesteps.max()) <= 1000
    sigmas = timesteps / 1000  # the flow-matching schedule's sigma is its timestep / 1000
    # x_t = (1 - sigma) x0 + sigma * noise, target = noise - x0: so x_t = x0 + sigma * target.
    rebuilt = latents + sigmas.view(-1, 1, 1, 1) * noised["none"].target
    assert torch.allclose(noised["none"].noisy, rebuilt, atol=1e-4)
    assert torch.equal(noised["none"].weights, torch.ones(512))
    assert torch.allclose(noised["sigma_sqrt"].weights, sigmas ** -2.0, rtol=1e-3)
    assert torch.allclose(noised["cosmap"].weights, 2 / (np.pi * (1 - 2 * sigmas + 2 * sigmas ** 2)), rtol=1e-3)
    # Undo the schedule's shift (sigma = s*u / (1 + (s-1)*u)) to see the drawn density of u.
    shift = float(scheduler.config.shift)
    u = sigmas / (shift - (shift - 1) * sigmas)
    middle = float(((u > 0.25) & (u < 0.75)).float().mean())
    # Logit-normal and mode draw the middle of the schedule more often than uniform draws do.
    if sampling == "uniform":
        assert 0.4 < middle < 0.6
    else:
        assert middle > 0.65


def test_latents_are_shifted_and_scaled(make_config) -> None:
    from studio.train.families import adapter_for

    adapter = adapter_for(make_config("sd3"))
    components = adapter.load(torch.device("cpu"), torch.float32)
    pixels = torch.rand(1, 3, 64, 64) * 2 - 1
    vae = components.vae
    with torch.no_grad():
        raw = vae.encode(pixels).latent_dist.mode()
        latents = adapter.encode_images(components, pixels)
    assert latents.shape == (1, 16, 8, 8)
    assert torch.allclose(latents, (raw - vae.config.shift_factor) * vae.config.scaling_factor)


def test_t5_missing_is_refused_with_the_way_out(make_config, run_training, events_of, tiny_sd3, tmp_path) -> None:
    config = make_config("sd3", model=ModelSection(family="sd3", base=str(tiny_sd3), use_t5=True))
    code, run_dir = run_training(config, tmp_path)
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert code == 1 and error.kind == "model" and "text_encoder_3" in error.message
    assert "use_t5 = false" in error.hint


def test_missing_clip_encoder_is_refused(make_config, run_training, events_of, tiny_sd3, tmp_path) -> None:
    broken = tmp_path / "sd3-without-te"
    shutil.copytree(tiny_sd3, broken)
    shutil.rmtree(broken / "text_encoder")
    code, run_dir = run_training(make_config("sd3", model=ModelSection(family="sd3", base=str(broken))), tmp_path)
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert code == 1 and error.kind == "model" and "text_encoder (the CLIP ViT-L text encoder)" in error.message


def test_with_a_tiny_t5_the_run_uses_it(make_config, run_training, events_of, tmp_path) -> None:
    from studio.train.pipelines.tiny import build_tiny_pipeline

    with_t5 = build_tiny_pipeline("sd3", tmp_path / "tiny-sd3-t5", t5=True)
    config = make_config("sd3", model=ModelSection(family="sd3", base=str(with_t5), use_t5=True),
                         training=TrainingSection(batch_size=2, max_steps=2, seed=1))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, events_of(run_dir)
    from studio.train.families import adapter_for

    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    assert len(components.text_encoders) == 3
    cond = adapter.encode_prompts(components, [PROMPT])
    assert cond["t5_embeds"].shape == (1, 256, 96) and cond["t5_embeds"].abs().sum() > 0


def test_shift_and_the_sampling_parameters_move_the_noise_levels(tiny_sd3: Path) -> None:
    """training.shift, logit_mean/logit_std and mode_scale each move where the drawn noise levels lie."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from studio.train.families.schemes import FlowMatchingScheme

    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(str(tiny_sd3), subfolder="scheduler")
    latents = torch.zeros(2048, 16, 2, 2)

    def mean_sigma(**training: object) -> float:
        scheme = FlowMatchingScheme(scheduler, TrainingSection(**training))  # type: ignore[arg-type]
        return float((scheme.noise(latents, torch.Generator().manual_seed(0)).timesteps / 1000).mean())

    own = mean_sigma()
    assert mean_sigma(shift=float(scheduler.config.shift)) == own  # the scheduler's own shift is the default
    assert mean_sigma(shift=1.0) < own - 0.05 < own + 0.05 < mean_sigma(shift=12.0)
    # The drawn u indexes the schedule from its noisy end, as in diffusers' SD3 script: a higher mean, less noise.
    assert mean_sigma(logit_mean=1.0) < own - 0.05 and mean_sigma(logit_mean=-1.0) > own + 0.05
    spread = [float((FlowMatchingScheme(scheduler, TrainingSection(logit_std=std)).noise(
        latents, torch.Generator().manual_seed(0)).timesteps / 1000).std()) for std in (0.5, 2.0)]
    assert spread[0] < spread[1]
    assert mean_sigma(timestep_sampling="mode", mode_scale=0.0) != mean_sigma(timestep_sampling="mode",
                                                                              mode_scale=1.29)


def test_a_lora_of_sd35_says_which_sd35_it_is_for(make_config, run_training, events_of, tiny_sd3: Path,
                                                  tmp_path: Path) -> None:
    """Model sites and UIs file a LoRA under the base model its model-spec architecture names (sd-scripts' names):
    a LoRA trained on SD3.5 medium or large said SD3 medium."""
    from diffusers import SD3Transformer2DModel, StableDiffusion3Pipeline

    from studio.train.families.sd3 import sd3_architecture
    from studio.train.pipelines.sd3 import TRANSFORMER

    assert sd3_architecture(TRANSFORMER) == "stable-diffusion-3-medium"
    assert sd3_architecture({**TRANSFORMER, "num_layers": 38, "num_attention_heads": 38}) == \
        "stable-diffusion-3-5-large"
    medium = {**TRANSFORMER, "dual_attention_layers": tuple(range(13)), "qk_norm": "rms_norm"}
    assert sd3_architecture(medium) == "stable-diffusion-3-5-medium"

    # A tiny SD3.5 medium (its first block with the second attention), trained through the run.
    pipe = StableDiffusion3Pipeline.from_pretrained(tiny_sd3, **NO_T5)
    pipe.transformer = SD3Transformer2DModel.from_config(
        {**pipe.transformer.config, "dual_attention_layers": (0,), "qk_norm": "rms_norm"})
    pipe.save_pretrained(tmp_path / "tiny-sd35-medium", safe_serialization=True)
    config = make_config("sd3", model=ModelSection(family="sd3", base=str(tmp_path / "tiny-sd35-medium")),
                         training=TrainingSection(batch_size=2, max_steps=1, learning_rate=1e-4, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), name="sd35", formats=["kohya"]))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if isinstance(e, Error)]
    with safe_open(str(run_dir / "output" / "sd35.safetensors"), "pt") as handle:
        assert handle.metadata()["modelspec.architecture"] == "stable-diffusion-3-5-medium/lora"
