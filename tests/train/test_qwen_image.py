"""Qwen-Image on its tiny pipeline: the tiny folder is a QwenImagePipeline the studio recognises."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
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

torch = pytest.importorskip("torch")

PROMPT = "a red circle on a blue background"
STEPS = 4


def _config(base: Path, data: Path, out: Path, **model: object) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family="qwen-image", base=str(base), **model),  # type: ignore[arg-type]
        method=MethodSection(kind="lora", rank=4, alpha=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=64, buckets=False,
                               caption_dropout=0.2),
        training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=5e-3, seed=3,
                                 timestep_sampling="uniform", cache_text_embeddings=True, cache_latents=True),
        sampling=SamplingSection(every_n_steps=STEPS, prompts=[PROMPT], steps=2, guidance=3.0),
        output=OutputSection(dir=str(out / "runs"), name="qwen-image", formats=["diffusers", "kohya"],
                             save_every_n_steps=2),
    )


@pytest.fixture(scope="module")
def tiny_qwen_image(tiny_model) -> Path:
    return tiny_model("qwen-image")


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


def test_an_edit_model_folder_is_not_taken_for_qwen_image(tiny_qwen_image: Path, tmp_path: Path) -> None:
    import shutil

    from studio.core.models.files import detect_model

    edit = tmp_path / "edit"
    shutil.copytree(tiny_qwen_image, edit)
    index = json.loads((edit / "model_index.json").read_text())
    (edit / "model_index.json").write_text(json.dumps({**index, "_class_name": "QwenImageEditPlusPipeline"}))
    assert detect_model(edit).family is None
