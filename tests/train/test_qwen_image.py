"""Qwen-Image on its tiny pipeline: the tiny folder is a QwenImagePipeline, a LoRA trains with cached text
embeddings and latents, samples, resumes to the very weights of an uninterrupted run, and both of its files
(diffusers and ComfyUI / musubi-tuner's) reload in QwenImagePipeline and change its image alike."""

from __future__ import annotations

import json
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


def _config(base: Path, data: Path, out: Path, **model: object) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family="qwen-image", base=str(base), **model),  # type: ignore[arg-type]
        method=MethodSection(kind="lora", rank=4, alpha=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=64, buckets=False,
                               caption_dropout=0.2),
        training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=3e-2, seed=3,
                                 timestep_sampling="uniform", cache_text_embeddings=True, cache_latents=True),
        sampling=SamplingSection(every_n_steps=STEPS, prompts=[PROMPT], steps=2, guidance=3.0),
        output=OutputSection(dir=str(out / "runs"), name="qwen-image", formats=["diffusers", "kohya"],
                             save_every_n_steps=2),
    )


@pytest.fixture(scope="module")
def tiny_qwen_image(tiny_model) -> Path:
    return tiny_model("qwen-image")


@pytest.fixture(scope="module")
def lora_run(tiny_qwen_image: Path, demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("qwen-image-lora")
    code, run_dir = train_in_process(_config(tiny_qwen_image, demo_data, root), root)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    return run_dir


def _keys(path: Path) -> list[str]:
    with safe_open(str(path), "pt") as handle:
        return list(handle.keys())


def _pipeline(base: Path):
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline.from_pretrained(str(base))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(pipe) -> np.ndarray:
    out = pipe(prompt=PROMPT, negative_prompt=" ", true_cfg_scale=3.0, num_inference_steps=2, height=64, width=64,
               generator=torch.Generator("cpu").manual_seed(5), output_type="np")
    return np.asarray(out.images[0])


def test_the_tiny_folder_is_a_qwen_image_pipeline_whose_tokenizer_drops_just_the_system_prompt(
        tiny_qwen_image: Path) -> None:
    from studio.core.models.files import detect_model
    from studio.train.pipelines.qwen_image import TEMPLATE_PREFIX

    index = json.loads((tiny_qwen_image / "model_index.json").read_text())
    assert index["_class_name"] == "QwenImagePipeline"
    assert index["text_encoder"] == ["transformers", "Qwen2_5_VLForConditionalGeneration"]
    assert index["vae"] == ["diffusers", "AutoencoderKLQwenImage"]
    pipe = _pipeline(tiny_qwen_image)
    # The pipeline drops the first 34 rows: the real tokenizer's length of its system prompt, and the tiny one's.
    assert pipe.prompt_template_encode_start_idx == 34 == len(pipe.tokenizer(TEMPLATE_PREFIX).input_ids)
    assert _image(pipe).shape == (64, 64, 3)
    assert detect_model(tiny_qwen_image).family == "qwen-image"


def test_edit_folders_are_taken_for_qwen_image_but_its_other_image_conditioned_pipelines_are_not(
        tiny_qwen_image: Path, tmp_path: Path) -> None:
    """Qwen-Image-Edit and Edit Plus are the family's edit models (test_qwen_image_edit.py); the layered, ControlNet
    and edit-inpainting pipelines of the same transformer train otherwise."""
    import shutil

    from studio.core.models.files import detect_model

    edit = tmp_path / "edit"
    shutil.copytree(tiny_qwen_image, edit)
    index = json.loads((edit / "model_index.json").read_text())
    for pipeline, family in (("QwenImageEditPipeline", "qwen-image"), ("QwenImageEditPlusPipeline", "qwen-image"),
                             ("QwenImageLayeredPipeline", None), ("QwenImageEditInpaintPipeline", None)):
        (edit / "model_index.json").write_text(json.dumps({**index, "_class_name": pipeline}))
        assert detect_model(edit).family == family, pipeline


def test_lora_trains_samples_and_writes_both_files(lora_run: Path, events_of) -> None:
    events = events_of(lora_run)
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == STEPS
    losses = [e.loss for e in events if isinstance(e, Step)]
    assert len(losses) == STEPS and all(np.isfinite(losses))
    assert [e.step for e in events if isinstance(e, Sample)] == [STEPS]
    assert (lora_run / "samples" / f"step-{STEPS:06d}-0.png").is_file()
    keys = _keys(lora_run / "output" / "pytorch_lora_weights.safetensors")
    assert keys and all(k.startswith("transformer.") for k in keys)
    for block in ("transformer_blocks.0", "transformer_blocks.1"):  # the image stream's attention of every block
        for part in ("to_q", "to_k", "to_v", "to_out.0"):
            assert f"transformer.{block}.attn.{part}.lora_A.weight" in keys, (block, part)
    comfy = _keys(lora_run / "output" / "qwen-image.safetensors")
    assert "lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight" in comfy
    assert "lora_unet_transformer_blocks_1_attn_to_out_0.alpha" in comfy
    with safe_open(str(lora_run / "output" / "qwen-image.safetensors"), "pt") as handle:
        meta = handle.metadata()
    assert meta["ss_base_model_version"] == "qwen_image" and meta["modelspec.architecture"] == "qwen-image/lora"
    # A flow-matching model: a UI that read "epsilon" here would pick a DDPM sampler for it.
    assert meta["modelspec.prediction_type"] == "flow"
    assert meta["modelspec.implementation"] == "https://github.com/QwenLM/Qwen-Image"


def test_both_files_reload_in_the_pipeline_and_change_the_image_alike(lora_run: Path, tiny_qwen_image: Path) -> None:
    pipe = _pipeline(tiny_qwen_image)
    base = _image(pipe)
    pipe.load_lora_weights(str(lora_run / "output"), weight_name="pytorch_lora_weights.safetensors")
    diffusers_image = _image(pipe)
    assert np.abs(diffusers_image - base).mean() > 1e-3
    # The ComfyUI / musubi-tuner file goes through diffusers' own reader of that layout (lora_unet_*).
    comfy_pipe = _pipeline(tiny_qwen_image)
    comfy_pipe.load_lora_weights(str(lora_run / "output"), weight_name="qwen-image.safetensors")
    np.testing.assert_allclose(_image(comfy_pipe), diffusers_image, atol=2e-3)


def test_the_example_recipe_latents_text_rows_timesteps_and_packed_prediction(tiny_qwen_image: Path,
                                                                              demo_data: Path, tmp_path: Path) -> None:
    """diffusers' Qwen-Image example: latents normalised by the VAE's statistics, the pipeline's own prompt
    rows, the unshifted schedule, the transformer fed packed latents and t / 1000, its output unpacked."""
    from diffusers import QwenImagePipeline

    from studio.train.families import adapter_for

    adapter = adapter_for(_config(tiny_qwen_image, demo_data, tmp_path))
    components = adapter.load(torch.device("cpu"), torch.float32)
    vae: object = components.vae
    pixels = torch.rand(2, 3, 64, 64) * 2 - 1
    latents = adapter.encode_images(components, pixels)
    assert latents.shape == (2, 4, 8, 8)
    raw = vae.encode(pixels.unsqueeze(2)).latent_dist.mode()[:, :, 0]  # type: ignore[attr-defined]
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1)  # type: ignore[attr-defined]
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1)  # type: ignore[attr-defined]
    torch.testing.assert_close(latents, (raw - mean) / std)
    torch.testing.assert_close(adapter.decode(vae, latents), vae.decode(  # type: ignore[attr-defined]
        raw.unsqueeze(2), return_dict=False)[0][:, :, 0])

    cond = adapter.encode_prompts(components, [PROMPT, ""])
    assert cond["prompt_embeds"].shape[:2] == (2, 128) and cond["prompt_mask"].shape == (2, 128)
    pipe = QwenImagePipeline(scheduler=components.scheduler, vae=components.vae,
                             text_encoder=components.text_encoders[0], tokenizer=components.tokenizers[0],
                             transformer=components.denoiser)
    rows, _ = pipe.encode_prompt(prompt=PROMPT, device=torch.device("cpu"), max_sequence_length=128)
    length = int(cond["prompt_mask"][0].sum())
    assert length == rows.shape[1] > int(cond["prompt_mask"][1].sum()) > 0  # the template's end stays
    torch.testing.assert_close(cond["prompt_embeds"][0, :length], rows[0])

    timesteps = torch.tensor([750.0, 20.0])
    prediction = adapter.predict(components.denoiser, latents, timesteps, cond)
    packed = QwenImagePipeline._pack_latents(latents, 2, 4, 8, 8)
    longest = length
    direct = components.denoiser(hidden_states=packed, encoder_hidden_states=cond["prompt_embeds"][:, :longest],
                                 encoder_hidden_states_mask=cond["prompt_mask"][:, :longest],
                                 timestep=timesteps / 1000, img_shapes=[[(1, 4, 4)]] * 2, return_dict=False)[0]
    unpacked = QwenImagePipeline._unpack_latents(direct, 64, 64, 8)[:, :, 0]
    torch.testing.assert_close(prediction, unpacked)
    scheme: object = adapter.noise_scheme(components)
    sigmas = scheme.sigmas  # type: ignore[attr-defined]
    # The dynamic-shifting scheduler's training schedule is the plain line: the middle stays at 0.5.
    assert sigmas[0] == pytest.approx(1.0) and sigmas[500] == pytest.approx(0.5, abs=2e-3)


def test_a_single_file_base_is_refused_with_what_to_use(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from studio.train.errors import TrainError
    from studio.train.families import adapter_for

    single = tmp_path / "qwen_image_bf16.safetensors"  # ComfyUI's transformer-only file
    save_file({"transformer_blocks.0.attn.to_q.weight": torch.zeros(2, 2)}, str(single))
    config = TrainConfig(model=ModelSection(family="qwen-image", base=str(single)),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(tmp_path))]))
    with pytest.raises(TrainError, match="is a single file; Qwen-Image trains from a diffusers folder") as refused:
        adapter_for(config).load(torch.device("cpu"), torch.float32)
    assert "Qwen/Qwen-Image" in refused.value.hint


def test_the_gpu_acceptance_script_runs_the_qwen_image_presets_on_a_qwen_image_model(tmp_path: Path) -> None:
    import importlib.util
    import sys

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("gpu_acceptance", root / "benchmarks" / "gpu_acceptance.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = script
    spec.loader.exec_module(script)
    chosen = [p for p in script.pick_presets(None) if p.family == "qwen-image"]
    assert [p.id for p in chosen] == [f"qwen-image-lora-{gb}gb" for gb in (12, 16, 24, 48)]  # lowest promise first
    assert {script.model_key(p) for p in chosen} == {"qwen-image"}
    folder = script.write_model("qwen-image", tmp_path, tiny=True)  # the dry run's model; the GPU's is full size
    assert json.loads((folder / "model_index.json").read_text())["_class_name"] == "QwenImagePipeline"


def test_a_lokr_is_one_lycoris_file_under_the_lora_unet_names(tiny_qwen_image: Path, demo_data: Path,
                                                              tmp_path: Path) -> None:
    from studio.train.families.qwen_image_names import comfy_knows

    config = _config(tiny_qwen_image, demo_data, tmp_path)
    config = TrainConfig.model_validate({**config.model_dump(), "method": {"kind": "lora", "network": "lokr",
                                                                            "rank": 4, "alpha": 4}})
    config.training.max_steps, config.sampling.prompts = 2, []
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    assert [p.name for p in sorted((run_dir / "output").glob("*.safetensors"))] == ["qwen-image.safetensors"]
    keys = _keys(run_dir / "output" / "qwen-image.safetensors")
    modules = {k.rsplit(".", 1)[0] for k in keys}
    assert "lora_unet_transformer_blocks_0_attn_to_q" in modules and any(k.endswith(".lokr_w1") for k in keys)
    # lora_unet_<diffusers name, dots as underscores>: each a module ComfyUI's key map and musubi-tuner place.
    transformer = _pipeline(tiny_qwen_image).transformer
    by_kohya = {"lora_unet_" + name.replace(".", "_"): name for name, _ in transformer.named_modules() if name}
    assert all(m in by_kohya and comfy_knows(by_kohya[m]) for m in modules), sorted(modules)[:4]
