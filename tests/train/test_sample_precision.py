"""Samples, class images and latents in every precision a GPU run places the models in.

A CPU run keeps every weight in fp32 (runtime.weight_dtype), so it never meets the GPU's
mix: frozen bf16/fp16 encoders and VAE, a trained fp32 denoiser (DreamBooth) whose
forward accelerate wraps in autocast with fp32 outputs, fp32 cached latents, parked
modules. These tests load each tiny family once, place copies of it exactly as a GPU
run would (the adapters' own load dtypes, accelerate's forward wrapper), and go through
the real sampling, class-image and encoding code with one denoising step at 16 px.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from studio.core.config.schema import (
    ConceptSection,
    MethodSection,
    ModelSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.config.weight_dtype import resolved_weight_dtype
from studio.core.runs.events import Error, Sample, read_events

torch = pytest.importorskip("torch")

FAMILIES = ("sd15", "sdxl", "sd3")
DTYPES = ("fp32", "fp16", "bf16")
METHODS = ("lora", "dreambooth")
PRECISIONS = ("no", "fp16", "bf16")
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SIZE = 16  # 16-bit convolutions are slow on a CPU: the smallest picture the tiny models take


@pytest.fixture(scope="module")
def loaded(tiny_models: dict[str, Path]) -> dict[str, Any]:
    """Each tiny family's adapter and components, loaded once in fp32 (the copies are placed per case)."""
    from studio.train.families import adapter_for

    out = {}
    for family in FAMILIES:
        config = TrainConfig(model=ModelSection(family=family, base=str(tiny_models[family])))  # type: ignore[arg-type]
        adapter = adapter_for(config)
        out[family] = (adapter, adapter.load(torch.device("cpu"), torch.float32))
    return out


def _config(family: str, base: str, dtype: str, method: str, precision: str, cache: bool,
            data: Path) -> TrainConfig:
    concept = ConceptSection(path=str(data), class_prompt="a photo of a shape", num_class_images=1)
    return TrainConfig(
        model=ModelSection(family=family, base=base, dtype=dtype),  # type: ignore[arg-type]
        method=MethodSection(kind=method, **({"rank": 4} if method == "lora" else {})),  # type: ignore[arg-type]
        training=TrainingSection(mixed_precision=precision, cache_latents=cache,  # type: ignore[arg-type]
                                 cache_text_embeddings=cache),
        sampling=SamplingSection(every_n_steps=1, prompts=["a red circle"], steps=1, guidance=3.0, size=64),
        dataset={"concepts": [concept], "resolution": 64, "buckets": False},  # type: ignore[arg-type]
    )


def _copy(loaded: Any) -> Any:
    components = copy.copy(loaded)
    components.denoiser = copy.deepcopy(loaded.denoiser)
    components.vae = copy.deepcopy(loaded.vae)
    components.text_encoders = [copy.deepcopy(e) for e in loaded.text_encoders]
    return components


def _place_as_on_a_gpu(adapter: Any, components: Any, config: TrainConfig) -> None:
    """Cast the components to the dtypes `adapter.load` gives them on a GPU for this config; what is
    trained stays fp32, as the trainer keeps it (the values do not matter here, only the dtypes)."""
    from diffusers.training_utils import cast_training_params

    from studio.train.families.loading import vae_dtype

    weight = TORCH_DTYPES[resolved_weight_dtype(config)]  # what runtime.weight_dtype answers on a GPU
    dtypes = adapter.load_dtypes(weight)
    components.denoiser.to(dtypes.get(adapter.denoiser_name, weight))
    components.vae.to(vae_dtype(components.vae, weight))
    for encoder, name in zip(components.text_encoders, adapter.text_encoder_names, strict=False):
        encoder.to(dtypes.get(name, weight))
    cast_training_params([components.denoiser], dtype=torch.float32)


@contextlib.contextmanager
def _prepared(module: Any, precision: str) -> Iterator[None]:
    """What accelerate.prepare does to a trained module under mixed precision: its forward runs in
    autocast and returns fp32 (accelerate's own convert_outputs_to_fp32)."""
    if precision == "no":
        yield
        return
    from accelerate.utils import convert_outputs_to_fp32

    module.forward = convert_outputs_to_fp32(torch.autocast("cpu", dtype=TORCH_DTYPES[precision])(module.forward))
    try:
        yield
    finally:
        del module.forward


def _autocast(precision: str) -> Any:
    """The run's autocast (accelerator.autocast on a GPU), as a factory."""
    return lambda: torch.autocast("cpu", dtype=TORCH_DTYPES.get(precision, torch.bfloat16),
                                  enabled=precision != "no")


def _train_for(adapter: Any, components: Any, config: TrainConfig) -> None:
    """The trainer's _prepare_models: a LoRA on the frozen base, or the whole denoiser in fp32."""
    from diffusers.training_utils import cast_training_params

    if config.method.kind == "lora":
        adapter.add_lora(components)
    else:
        components.denoiser.to(dtype=torch.float32).requires_grad_(True)
    cast_training_params([components.denoiser], dtype=torch.float32)
    components.denoiser.train()


def _one_loss(adapter: Any, components: Any, precision: str) -> float:
    """Latents encoded as the cache keeps them (fp32), one training prediction under the run's autocast, its loss."""
    pixels = torch.rand(1, 3, SIZE, SIZE) * 2 - 1
    with torch.no_grad():
        latents = adapter.encode_images(components, pixels).float()
        cond = adapter.encode_prompts(components, ["a red circle"])
    batch = {"target_size": (SIZE, SIZE), "original_sizes": [(SIZE, SIZE)], "crops_top_left": [(0, 0)]}
    cond = adapter.extra_conditioning(batch, cond, torch.device("cpu"))
    scheme = adapter.noise_scheme(components)
    noised = scheme.noise(latents, torch.Generator().manual_seed(0))
    with _autocast(precision)():
        prediction = adapter.predict(components.denoiser, noised.noisy, noised.timesteps, cond)
    return float(scheme.loss(prediction, noised, torch.ones(1)).detach())


def _images(adapter: Any, components: Any, plan: Any, prompts: list[str]) -> list[Any]:
    """The sampling path (samples.render_images) at SIZE px; any failure raises with its traceback."""
    from studio.train.samples import ImageJob, render_images

    images: list[Any] = []
    jobs = [ImageJob(prompt, 1234 + index) for index, prompt in enumerate(prompts)]
    render_images(adapter, components, plan, jobs, SIZE, lambda index, image: images.append(image),
                  lambda stage, index, prompt: None)
    return images


@pytest.fixture
def reporter(tmp_path: Path) -> Iterator[Any]:
    from studio.train.progress.reporting import Reporter

    writer = Reporter(tmp_path, active=True)
    yield writer
    writer.close()


@pytest.fixture(autouse=True)
def _norms_in_fp32_under_autocast(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's autocast runs group and layer norms in fp32; the CPU's runs them in the input's dtype,
    which fails on half inputs with weights in the other half type. Emulate the GPU here."""
    import torch.nn.functional as F

    for name in ("group_norm", "layer_norm"):
        original = getattr(F, name)

        def in_fp32(x: Any, shape: Any, weight: Any = None, bias: Any = None, *args: Any,
                    _original: Any = original, **kwargs: Any) -> Any:
            if not torch.is_autocast_enabled("cpu"):
                return _original(x, shape, weight, bias, *args, **kwargs)
            with torch.autocast("cpu", enabled=False):
                wide = [None if t is None else t.float() for t in (weight, bias)]
                return _original(x.float(), shape, *wide, *args, **kwargs)

        monkeypatch.setattr(F, name, in_fp32)


def _errors(run_dir: Path) -> list[Error]:
    return [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, Error)]


@pytest.mark.parametrize(("family", "method"), list(itertools.product(FAMILIES, METHODS)))
def test_samples_class_images_and_latents_in_gpu_precision(
    family: str, method: str, loaded: dict[str, Any], tiny_models: dict[str, Path], demo_data: Path,
) -> None:
    """Every model.dtype x mixed_precision x cache combination of one family and method."""
    from studio.train.memory.placement import FrozenOffload
    from studio.train.samples import SamplingPlan

    base = str(tiny_models[family])
    adapter, fp32_components = loaded[family]
    adapter.config = _config(family, base, "fp32", method, "no", False, demo_data)
    components = _copy(fp32_components)
    _train_for(adapter, components, adapter.config)
    for dtype in DTYPES:
        adapter.config = _config(family, base, dtype, method, "no", False, demo_data)
        _place_as_on_a_gpu(adapter, components, adapter.config)
        assert components.vae.dtype == (torch.float32 if dtype != "bf16" else torch.bfloat16)
        for precision in PRECISIONS if method == "dreambooth" else ():
            # Class images come from the base model before accelerate has prepared anything.
            plan = SamplingPlan(FrozenOffload(torch.device("cpu")), autocast=_autocast(precision))
            assert len(_images(adapter, components, plan, ["a photo of a shape"])) == 1, (dtype, precision)
        for precision, cache in itertools.product(PRECISIONS, (False, True)):
            case = f"{family} {method} model.dtype={dtype} mixed_precision={precision} cache={cache}"
            adapter.config = _config(family, base, dtype, method, precision, cache, demo_data)
            offload = FrozenOffload(torch.device("cpu"))
            if cache:  # as the trainer parks them after filling the caches
                offload.add("vae", components.vae)
                for index, encoder in enumerate(components.text_encoders):
                    offload.add(f"text_encoder_{index + 1}", encoder)
                offload.offload()
            with _prepared(components.denoiser, precision):
                if not cache:  # the step's latents are fp32 either way; caching changes where modules wait
                    assert np.isfinite(_one_loss(adapter, components, precision)), case
                plan = SamplingPlan(offload, autocast=_autocast(precision))
                images = _images(adapter, components, plan, ["a"])
            assert len(images) == 1 and np.asarray(images[0]).std() > 0, case
            assert components.denoiser.training, case  # back in train mode for the next step
            assert offload.parked == set(offload.modules), case  # and everything parked again


def test_a_sample_that_raises_is_reported_and_the_memory_given_back(
    loaded: dict[str, Any], tiny_models: dict[str, Path], demo_data: Path, tmp_path: Path, reporter: Any,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from studio.train.memory.placement import FrozenOffload
    from studio.train.samples import SamplingPlan, make_samples

    adapter, fp32_components = loaded["sd15"]
    adapter.config = _config("sd15", str(tiny_models["sd15"]), "bf16", "lora", "bf16", True, demo_data)
    components = _copy(fp32_components)
    _train_for(adapter, components, adapter.config)
    _place_as_on_a_gpu(adapter, components, adapter.config)
    offload = FrozenOffload(torch.device("cpu"))
    offload.add("vae", components.vae)
    offload.offload()

    import weakref

    import studio.train.samples as samples

    held: list[Any] = []

    def out_of_memory(vae: Any, latents: Any) -> Any:
        held.append(weakref.ref(latents))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB")

    freed: list[bool] = []
    give_back = samples.give_back_memory

    def giving_back(components: Any) -> None:
        give_back(components)
        freed.append(held[0]() is None)  # what the allocator's cache would be handed back on a GPU

    monkeypatch.setattr(adapter, "decode", out_of_memory)
    monkeypatch.setattr(samples, "give_back_memory", giving_back)
    assert make_samples(adapter, components, SamplingPlan(offload), tmp_path, 8, reporter) == []
    assert freed == [True]  # the sample's latents were unreachable when the memory was given back
    error = _errors(tmp_path)[-1]
    assert error.kind == "sample"
    assert error.message == ('sample at step 8 failed while decoding the prompt "a red circle": '
                             "OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB")
    assert "lower sampling.size (64 px)" in error.hint and 'sampling.vae_tiling = "on"' in error.hint
    assert "Traceback" in capsys.readouterr().err  # the console keeps the whole story
    assert components.denoiser.training and offload.parked == {"vae"}  # what the sample took is back
    assert not any(isinstance(e, Sample) for e in read_events(tmp_path / "events.jsonl"))
    # A prompt that sets its own size: the hint names that size, which sampling.size would not lower.
    adapter.config.sampling.prompts = ["a red circle --w 96 --h 64"]
    assert make_samples(adapter, components, SamplingPlan(offload), tmp_path, 9, reporter) == []
    error = _errors(tmp_path)[-1]
    assert error.message.startswith('sample at step 9 failed while decoding the prompt "a red circle --w 96 --h 64"')
    assert "lower the prompt's --w and --h (96 x 64 px)" in error.hint
