"""Samples of a base stored in 8 bits: the denoiser sees the latents in the precision it computes in.

Pipelines cast the latents to `transformer.dtype` before each step; with model.fp8_base a FLUX.2 [klein]
transformer's first weight is 8-bit, and the latents must not be rounded to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import MethodSection, ModelSection, SamplingSection, TrainConfig

torch = pytest.importorskip("torch")


def test_an_fp8_klein_sample_hands_the_transformer_unrounded_latents(tiny_flux2_klein: Path) -> None:
    from diffusers.training_utils import cast_training_params

    from studio.train.families import adapter_for
    from studio.train.memory.fp8 import STORAGE, store_in_float8
    from studio.train.memory.placement import FrozenOffload
    from studio.train.samples import ImageJob, SamplingPlan, render_images

    config = TrainConfig(model=ModelSection(family="flux2-klein", base=str(tiny_flux2_klein), fp8_base=True),
                         method=MethodSection(rank=4),
                         sampling=SamplingSection(prompts=["a red circle"], steps=2, guidance=4.0))
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    adapter.add_lora(components)
    cast_training_params([components.denoiser], dtype=torch.float32)
    store_in_float8(components.denoiser, torch.float32)
    denoiser = components.denoiser
    model_class = type(denoiser)
    assert denoiser.dtype == STORAGE  # what the pipeline reads: the first weight is 8-bit

    seen: list[Any] = []
    forward = denoiser.forward

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["hidden_states"].detach().clone())
        return forward(*args, **kwargs)

    denoiser.forward = spy
    images: list[Any] = []
    plan = SamplingPlan(FrozenOffload(torch.device("cpu")))
    render_images(adapter, components, plan, [ImageJob("a red circle", 7)], 32,
                  lambda index, image: images.append(image), lambda stage, index, prompt: None)
    assert len(images) == 1 and seen
    for latents in seen:  # rounded to 8 bits, a latent would come back unchanged from another rounding
        assert not torch.equal(latents, latents.to(STORAGE).to(latents.dtype))
    assert type(denoiser) is model_class and denoiser.dtype == STORAGE  # as it was for training
