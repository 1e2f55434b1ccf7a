"""SDXL: LoRA (UNet and both text encoders) and DreamBooth runs, outputs that diffusers loads,
the kohya file's names, size-and-crop conditioning, the fp16-safe VAE and refusals."""

from __future__ import annotations

import json
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
    TrainingSection,
)
from studio.core.runs.events import Error, RunFinished

torch = pytest.importorskip("torch")

PROMPT = "a red circle on a blue background"


def _keys(path: Path) -> list[str]:
    with safe_open(str(path), "pt") as handle:
        return list(handle.keys())


def _pairs(keys: list[str]) -> int:
    return sum(1 for k in keys if k.endswith(("lora_A.weight", "down.weight")))


@pytest.fixture(scope="module")
def lora_run(tiny_sdxl: Path, demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from studio.core.config.schema import TrainConfig

    root = tmp_path_factory.mktemp("sdxl-lora")
    config = TrainConfig(
        model=ModelSection(family="sdxl", base=str(tiny_sdxl)),
        method=MethodSection(kind="lora", rank=4, alpha=8, train_text_encoder=True),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=4, learning_rate=5e-3, seed=3),
        sampling=SamplingSection(every_n_steps=4, prompts=[PROMPT], steps=2),
        output=OutputSection(dir=str(root / "runs"), name="shapes-xl"),
    )
    code, run_dir = train_in_process(config, root)
    assert code == 0, (run_dir / "events.jsonl").read_text()[-2000:]
    return run_dir


def test_lora_run_completes_with_samples(lora_run: Path, events_of) -> None:
    finished = events_of(lora_run)[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == 4
    assert (lora_run / "samples" / "step-000004-0.png").is_file()


def test_kohya_file_names_both_text_encoders_and_pairs_match(lora_run: Path) -> None:
    kohya = _keys(lora_run / "output" / "shapes-xl.safetensors")
    diffusers_keys = _keys(lora_run / "output" / "pytorch_lora_weights.safetensors")
    for prefix in ("lora_unet_", "lora_te1_", "lora_te2_"):
        assert any(k.startswith(prefix) and k.endswith(".lora_down.weight") for k in kohya), prefix
    assert not any(k.startswith("lora_te_") for k in kohya)
    assert _pairs(kohya) == _pairs(diffusers_keys) > 0
    assert sum(k.endswith(".alpha") for k in kohya) == _pairs(kohya)


def test_kohya_file_names_its_architecture_as_sd_scripts_does(lora_run: Path) -> None:
    with safe_open(str(lora_run / "output" / "shapes-xl.safetensors"), "pt") as handle:
        meta = handle.metadata()
    assert meta["modelspec.architecture"] == "stable-diffusion-xl-v1-base/lora"
    assert meta["modelspec.implementation"] == "https://github.com/Stability-AI/generative-models"
    assert meta["modelspec.prediction_type"] == "epsilon"
    assert meta["modelspec.resolution"] == "64x64" and meta["ss_base_model_version"] == "sdxl_base_v1-0"


def test_diffusers_file_names_modules_as_the_published_checkpoint(lora_run: Path) -> None:
    path = lora_run / "output" / "pytorch_lora_weights.safetensors"
    assert_lora_in_hub_layout(path, "sdxl", {"unet", "text_encoder", "text_encoder_2"})


def _image(pipe, seed: int = 5) -> np.ndarray:
    out = pipe(PROMPT, num_inference_steps=2, height=64, width=64, guidance_scale=5.0,
               generator=torch.Generator("cpu").manual_seed(seed), output_type="np")
    return np.asarray(out.images[0])


def test_lora_loads_into_the_sdxl_pipeline_and_changes_the_image(lora_run: Path, tiny_sdxl: Path) -> None:
    from diffusers import StableDiffusionXLPipeline

    pipe = StableDiffusionXLPipeline.from_pretrained(str(tiny_sdxl), add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    base = _image(pipe)
    pipe.load_lora_weights(str(lora_run / "output"), weight_name="pytorch_lora_weights.safetensors")
    assert any("lora" in n for n, _ in pipe.text_encoder_2.named_parameters())  # both encoders got theirs
    with_lora = _image(pipe)
    assert np.abs(with_lora - base).max() > 1e-3
    pipe.unload_lora_weights()
    pipe.load_lora_weights(str(lora_run / "output"), weight_name="shapes-xl.safetensors")
    assert np.allclose(_image(pipe), with_lora, atol=2e-3)  # the kohya file is the same LoRA


def test_dreambooth_with_prior_preservation(make_config, run_training, events_of, demo_data, tiny_sdxl,
                                            tmp_path) -> None:
    from diffusers import StableDiffusionXLPipeline

    concept = ConceptSection(path=str(demo_data), instance_prompt="a photo of sks dog", caption_source="prompt",
                             class_prompt="a photo of a dog", num_class_images=2, prior_loss_weight=0.5)
    config = make_config(
        "sdxl", method=MethodSection(kind="dreambooth"),
        dataset=DatasetSection(concepts=[concept], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-4, seed=1),
        sampling=SamplingSection(steps=2),
        output=OutputSection(dir=str(tmp_path / "runs"), save_precision="fp32"),
    )
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, events_of(run_dir)
    assert len(list((run_dir / "class_images" / "concept-0").glob("*.png"))) == 2
    output = run_dir / "output"
    assert json.loads((output / "model_index.json").read_text())["_class_name"] == "StableDiffusionXLPipeline"
    assert {"unet", "text_encoder", "text_encoder_2"} <= set(assert_folder_in_hub_layout(output, "sdxl"))
    tuned = StableDiffusionXLPipeline.from_pretrained(str(output), add_watermarker=False)
    base = StableDiffusionXLPipeline.from_pretrained(str(tiny_sdxl), add_watermarker=False)
    tuned.set_progress_bar_config(disable=True)
    base.set_progress_bar_config(disable=True)
    assert np.abs(_image(tuned) - _image(base)).max() > 1e-3


def test_time_ids_follow_each_images_crop(make_config, tmp_path) -> None:
    from PIL import Image

    from studio.train.data.batches import EpochPlan, MicroBatches
    from studio.train.data.items import collect_items
    from studio.train.families import adapter_for

    folder = tmp_path / "wide"
    folder.mkdir()
    Image.new("RGB", (192, 64), (200, 30, 30)).save(folder / "wide.png")
    (folder / "wide.txt").write_text("a red picture", encoding="utf-8")

    def ids(crop: str, seed: int, cached: bool = False) -> list[float]:
        dataset = DatasetSection(concepts=[ConceptSection(path=str(folder))], resolution=64, buckets=False,
                                 crop=crop)  # type: ignore[arg-type]
        config = make_config("sdxl", dataset=dataset, training=TrainingSection(batch_size=1, max_steps=1, seed=seed))
        items = collect_items(config, lambda *a: None)
        batch = MicroBatches(EpochPlan(items, 1, 1, seed), dataset, 0, 0, 1, with_pixels=not cached)[0]
        cond = adapter_for(config).extra_conditioning(batch, {}, torch.device("cpu"))
        return [float(v) for v in cond["time_ids"][0]]

    # 192x64 covers the 64x64 square as is: original (h, w), crop (top, left), target (h, w).
    assert ids("center", 1) == [64, 192, 0, 64, 64, 64]
    assert ids("center", 1, cached=True) == ids("center", 1)  # cached latents carry their center crop
    lefts = {ids("random", seed)[3] for seed in range(6)}
    assert len(lefts) > 1 and all(0 <= left <= 128 for left in lefts)


def test_vae_is_upcast_in_fp16_unless_it_is_fp16_safe(make_config, tiny_sdxl, tmp_path) -> None:
    from diffusers import AutoencoderKL

    from studio.train.families import adapter_for

    adapter = adapter_for(make_config("sdxl"))
    assert adapter.load(torch.device("cpu"), torch.float16).vae.dtype == torch.float32
    fixed = tmp_path / "vae-fp16-fix"
    vae = AutoencoderKL.from_pretrained(str(tiny_sdxl), subfolder="vae")
    vae.register_to_config(force_upcast=False)
    vae.save_pretrained(fixed)
    config = make_config("sdxl", model=ModelSection(family="sdxl", base=str(tiny_sdxl), vae=str(fixed)))
    assert adapter_for(config).load(torch.device("cpu"), torch.float16).vae.dtype == torch.float16


def test_missing_second_text_encoder_is_refused(make_config, run_training, events_of, tiny_sdxl, tmp_path) -> None:
    broken = tmp_path / "xl-without-te2"
    shutil.copytree(tiny_sdxl, broken)
    shutil.rmtree(broken / "text_encoder_2")
    code, run_dir = run_training(make_config("sdxl", model=ModelSection(family="sdxl", base=str(broken))), tmp_path)
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert code == 1 and error.kind == "model"
    assert "text_encoder_2" in error.message and "OpenCLIP" in error.message and error.hint
