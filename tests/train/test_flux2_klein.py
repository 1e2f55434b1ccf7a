"""FLUX.2 [klein] on its tiny pipeline: a LoRA trains with cached text embeddings and latents, samples,
resumes to the very weights of an uninterrupted run, and both of its files (diffusers and ComfyUI's
original layout) reload in Flux2KleinPipeline and change its image alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
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
from studio.core.runs.events import RunFinished, Sample, Step

torch = pytest.importorskip("torch")

PROMPT = "a red circle on a blue background"
STEPS = 4


def _config(base: Path, data: Path, out: Path) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family="flux2-klein", base=str(base)),
        method=MethodSection(kind="lora", rank=4, alpha=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=64, buckets=False,
                               caption_dropout=0.2),
        training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=5e-3, seed=3,
                                 timestep_sampling="uniform", cache_text_embeddings=True, cache_latents=True),
        sampling=SamplingSection(every_n_steps=STEPS, prompts=[PROMPT], steps=2, guidance=4.0),
        output=OutputSection(dir=str(out / "runs"), name="klein", formats=["diffusers", "kohya"],
                             save_every_n_steps=2),
    )


@pytest.fixture(scope="module")
def lora_run(tiny_flux2_klein: Path, demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("klein-lora")
    code, run_dir = train_in_process(_config(tiny_flux2_klein, demo_data, root), root)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    return run_dir


def _keys(path: Path) -> list[str]:
    with safe_open(str(path), "pt") as handle:
        return list(handle.keys())


def test_lora_trains_samples_and_writes_both_files(lora_run: Path, events_of) -> None:
    events = events_of(lora_run)
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == STEPS
    losses = [e.loss for e in events if isinstance(e, Step)]
    assert len(losses) == STEPS and all(np.isfinite(losses))
    assert [e.step for e in events if isinstance(e, Sample)] == [STEPS]
    assert (lora_run / "samples" / f"step-{STEPS:06d}-0.png").is_file()
    phases = [e.message for e in events if e.type == "phase" and e.name == "caching"]
    assert phases, "the text embeddings and latents are cached before the first step"
    keys = _keys(lora_run / "output" / "pytorch_lora_weights.safetensors")
    assert keys and all(k.startswith("transformer.") for k in keys)
    assert any(".transformer_blocks.0.attn.to_q." in k for k in keys)  # double-stream image attention
    assert any(".single_transformer_blocks.1.attn.to_qkv_mlp_proj." in k for k in keys)  # fused projections
    assert any(".single_transformer_blocks.1.attn.to_out." in k for k in keys)
    comfy = _keys(lora_run / "output" / "klein.safetensors")
    assert "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight" in comfy
    assert "lora_unet_single_blocks_1_linear2.alpha" in comfy
    with safe_open(str(lora_run / "output" / "klein.safetensors"), "pt") as handle:
        meta = handle.metadata()
    assert meta["ss_base_model_version"] == "flux2_klein" and meta["modelspec.architecture"] == "flux-2-klein/lora"
    # A flow-matching model: a UI that read "epsilon" here would pick a DDPM sampler for it.
    assert meta["modelspec.prediction_type"] == "flow"
    assert meta["modelspec.implementation"] == "https://github.com/black-forest-labs/flux2"


def _pipeline(base: Path):
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(str(base))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(pipe) -> np.ndarray:
    out = pipe(prompt=PROMPT, num_inference_steps=2, height=64, width=64, guidance_scale=4.0,
               generator=torch.Generator("cpu").manual_seed(5), output_type="np")
    return np.asarray(out.images[0])


def test_both_files_reload_in_the_pipeline_and_change_the_image_alike(lora_run: Path, tiny_flux2_klein: Path) -> None:
    pipe = _pipeline(tiny_flux2_klein)
    base = _image(pipe)
    pipe.load_lora_weights(str(lora_run / "output"), weight_name="pytorch_lora_weights.safetensors")
    diffusers_image = _image(pipe)
    assert np.abs(diffusers_image - base).mean() > 1e-3
    # ComfyUI's file goes through diffusers' own reader of that layout (lora_unet_double_blocks_...).
    comfy_pipe = _pipeline(tiny_flux2_klein)
    comfy_pipe.load_lora_weights(str(lora_run / "output"), weight_name="klein.safetensors")
    np.testing.assert_allclose(_image(comfy_pipe), diffusers_image, atol=2e-3)


def test_images_become_normalised_patchified_latents_and_predictions_keep_their_grid(tiny_flux2_klein: Path,
                                                                                    demo_data: Path,
                                                                                    tmp_path: Path) -> None:
    """The example's recipe: 2x2 patches, normalised by the VAE's batch-norm statistics; the transformer's
    packed output goes back onto the latent grid; the training schedule is the unshifted one."""
    from studio.train.families import adapter_for

    adapter = adapter_for(_config(tiny_flux2_klein, demo_data, tmp_path))
    components = adapter.load(torch.device("cpu"), torch.float32)
    pixels = torch.rand(2, 3, 64, 64) * 2 - 1
    latents = adapter.encode_images(components, pixels)
    vae: object = components.vae
    raw = vae.encode(pixels).latent_dist.mode()  # type: ignore[attr-defined]
    assert raw.shape == (2, 8, 8, 8) and latents.shape == (2, 32, 4, 4)
    patch = raw[:, :, :2, :2].reshape(2, 32)  # channel c * 4 + dy * 2 + dx, as _patchify_latents orders them
    mean = vae.bn.running_mean  # type: ignore[attr-defined]
    std = torch.sqrt(vae.bn.running_var + vae.config.batch_norm_eps)  # type: ignore[attr-defined]
    torch.testing.assert_close(latents[:, :, 0, 0], (patch - mean) / std)
    cond = adapter.encode_prompts(components, [PROMPT, ""])
    assert cond["prompt_embeds"].shape[:2] == (2, 128) and cond["prompt_embeds"].shape[2] == 48
    prediction = adapter.predict(components.denoiser, latents, torch.tensor([500.0, 20.0]), cond)
    assert prediction.shape == latents.shape
    scheme: object = adapter.noise_scheme(components)
    sigmas = scheme.sigmas  # type: ignore[attr-defined]
    # The scheduler shifts by resolution only when sampling: training draws from the plain line
    # (with the config's shift of 3 the middle sigma would be 0.75).
    torch.testing.assert_close(sigmas, scheme.timesteps / 1000)  # type: ignore[attr-defined]
    assert sigmas[0] == pytest.approx(1.0) and sigmas[500] == pytest.approx(0.5, abs=2e-3)
