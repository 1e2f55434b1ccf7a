"""Sample prompts embedded where the encoders are (system memory with model.text_encoder_on_cpu) reach the
denoiser on its own device, for every family's pipeline (SD3's hands given embeddings on as they are)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import (
    MethodSection,
    ModelSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)

torch = pytest.importorskip("torch")


def test_class_images_embedded_on_the_cpu_reach_the_denoiser_on_its_device(
    tiny_sd3: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from studio.train.families import adapter_for
    from studio.train.memory.placement import FrozenOffload
    from studio.train.samples import ImageJob, SamplingPlan, render_images

    config = TrainConfig(model=ModelSection(family="sd3", base=str(tiny_sd3), text_encoder_on_cpu=True),
                         method=MethodSection(kind="dreambooth"),
                         training=TrainingSection(cache_text_embeddings=True),
                         sampling=SamplingSection(prompts=["a red circle"], steps=1))
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    # The GPU's part, played by the meta device: the denoiser there, the encoders in system memory.
    components.denoiser.to("meta")
    handed: list[set[str]] = []

    def denoise(pipeline: Any, conditioning: Any, generator: Any, size: int, references: Any = ()) -> Any:
        handed.append({value.device.type for value in conditioning.values() if isinstance(value, torch.Tensor)})
        return torch.zeros(1, 4, 2, 2)

    monkeypatch.setattr(adapter, "denoise", denoise)
    monkeypatch.setattr(adapter, "decode", lambda vae, latents: torch.zeros(1, 3, 16, 16))
    images: list[Any] = []
    render_images(adapter, components, SamplingPlan(FrozenOffload(torch.device("cpu"))),
                  [ImageJob("a photo of a shape", 1)], 16, lambda index, image: images.append(image),
                  lambda stage, index, prompt: None)
    assert handed == [{"meta"}] and len(images) == 1
