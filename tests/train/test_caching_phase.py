"""With cached text, the captions and the sample prompts are encoded while the denoiser waits off the GPU;
samples then encode nothing, and the run trains and samples exactly as one that encodes as it goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from studio.core.config.schema import SamplingSection, TrainingSection
from studio.core.runs.events import Step

torch = pytest.importorskip("torch")

CACHED = TrainingSection(batch_size=2, max_steps=2, seed=3, cache_latents=True, cache_text_embeddings=True)
SAMPLING = SamplingSection(every_n_steps=2, prompts=["a red circle", "a blue square"], steps=2, guidance=2.0,
                           size=64)
HELD = torch.device("meta")  # stands for system memory: a move there is recorded, not made


def _record_moves(monkeypatch: pytest.MonkeyPatch) -> dict[int, str]:
    """Every `module.to(device)` records where the module was sent; a move to HELD is not made (the CPU is
    the training device here, so the held denoiser is told apart by the name of where it went)."""
    where: dict[int, str] = {}
    original = torch.nn.Module.to

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if device is not None:
            where[id(self)] = torch.device(device).type
            if torch.device(device) == HELD:
                return self
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", to)
    return where


def _watch(monkeypatch: pytest.MonkeyPatch, where: dict[int, str]) -> dict[str, Any]:
    """Where the denoiser is at each caption encoding, and which prompts samples encode, by stage."""
    import studio.train.loop as loop
    from studio.train.families.sd15 import SD15Adapter

    seen: dict[str, Any] = {"captions": [], "prompts": [], "stage": "setup"}
    setup, encode, sample = loop.Trainer.setup, SD15Adapter.encode_prompts, SD15Adapter.sample_conditioning

    def watched_setup(self: Any) -> None:
        seen["trainer"] = self
        setup(self)
        seen["stage"] = "training"

    def watched_encode(self: Any, components: Any, captions: list[str]) -> Any:
        if seen["stage"] == "setup":
            seen["captions"].append(where.get(id(components.denoiser), "not moved"))
        return encode(self, components, captions)

    def watched_sample(self: Any, pipeline: Any, prompt: str, negative: str) -> Any:
        seen["prompts"].append((seen["stage"], prompt))
        return sample(self, pipeline, prompt, negative)

    monkeypatch.setattr(loop.Trainer, "setup", watched_setup)
    monkeypatch.setattr(SD15Adapter, "encode_prompts", watched_encode)
    monkeypatch.setattr(SD15Adapter, "sample_conditioning", watched_sample)
    monkeypatch.setattr(loop, "HOLD_DEVICE", HELD)
    return seen


def test_captions_and_prompts_are_encoded_before_the_denoiser_comes(
    make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import studio.train.data.caching_phase as caching_phase
    import studio.train.loop as loop

    where = _record_moves(monkeypatch)
    seen = _watch(monkeypatch, where)
    config = make_config(training=CACHED, sampling=SAMPLING)
    code, run_dir = run_training(config, tmp_path / "held")
    assert code == 0
    trainer = seen["trainer"]
    # Every caption was encoded with the denoiser held off the training device ...
    assert seen["captions"] and set(seen["captions"]) == {"meta"}
    # ... which it reached once the encoder and the VAE had left (the CPU trains here).
    assert where[id(trainer.components.denoiser)] == "cpu"
    assert where[id(trainer.components.text_encoders[0])] == where[id(trainer.components.vae)] == "cpu"
    # The sample prompts were encoded with the captions; the samples at step 2 and at the end encoded none.
    assert seen["prompts"] == [("setup", "a red circle"), ("setup", "a blue square")]
    held_images = [np.asarray(Image.open(run_dir / f"samples/step-000002-{i}.png")) for i in range(2)]
    assert all(image.std() > 0 for image in held_images)

    # The former order (the denoiser on the GPU from the start, prompts encoded at each sample) gives the same.
    monkeypatch.setattr(loop, "holds_denoiser", lambda *args: False)
    monkeypatch.setattr(caching_phase, "prompts_cached", lambda config: False)
    seen["stage"], seen["prompts"], seen["captions"] = "setup", [], []
    code, plain_dir = run_training(config, tmp_path / "plain")
    assert code == 0
    assert set(seen["captions"]) == {"cpu"}  # loaded where it trains
    assert [stage for stage, _ in seen["prompts"]] == ["training", "training"]
    losses = [[e.loss for e in events_of(folder) if isinstance(e, Step)] for folder in (run_dir, plain_dir)]
    assert len(losses[0]) == 2 and losses[0] == losses[1]
    for i, image in enumerate(held_images):
        assert np.array_equal(image, np.asarray(Image.open(plain_dir / f"samples/step-000002-{i}.png")))


def test_text_encoder_on_cpu_embeds_in_system_memory_and_trains_the_same(
    make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import studio.train.families.base as base

    where = _record_moves(monkeypatch)
    seen = _watch(monkeypatch, where)
    encoder_at: list[str] = []
    from studio.train.families.sd15 import SD15Adapter

    encode = SD15Adapter.encode_prompts

    def watched(self: Any, components: Any, captions: list[str]) -> Any:
        encoder_at.append(where.get(id(components.text_encoders[0]), "not moved"))
        return encode(self, components, captions)

    monkeypatch.setattr(SD15Adapter, "encode_prompts", watched)
    monkeypatch.setattr(base, "ENCODER_HOME", HELD)
    config = make_config(training=CACHED, sampling=SAMPLING)
    config.model.text_encoder_on_cpu = True
    code, run_dir = run_training(config, tmp_path / "cpu")
    assert code == 0
    # Every caption was embedded with the encoder in system memory (it never went to the training device).
    assert encoder_at and set(encoder_at) == {"meta"}
    assert [stage for stage, _ in seen["prompts"]] == ["setup", "setup"]
    assert (run_dir / "samples" / "step-000002-0.png").is_file()

    monkeypatch.setattr(base, "ENCODER_HOME", torch.device("cpu"))
    config.model.text_encoder_on_cpu = False
    code, plain_dir = run_training(config, tmp_path / "gpu")
    assert code == 0
    losses = [[e.loss for e in events_of(folder) if isinstance(e, Step)] for folder in (run_dir, plain_dir)]
    assert len(losses[0]) == 2 and losses[0] == losses[1]


def test_the_negative_prompt_is_encoded_once_for_all_sample_prompts(tiny_flux2_klein: Path) -> None:
    """FLUX.2 [klein] embeds the negative prompt apart from each sample prompt: with the encoder on the CPU
    each encoding of a 512-token prompt takes seconds, so three prompts cost four encodings, not six."""
    from studio.core.config.schema import ModelSection, TrainConfig
    from studio.train.data.caching_phase import encode_sample_prompts
    from studio.train.families import adapter_for

    prompts = ["a red circle", "a blue square", "a green star"]
    config = TrainConfig(model=ModelSection(family="flux2-klein", base=str(tiny_flux2_klein)),
                         training=TrainingSection(cache_text_embeddings=True),
                         sampling=SamplingSection(prompts=prompts, steps=2))
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    runs: list[int] = []
    components.text_encoders[0].register_forward_hook(lambda module, args, output: runs.append(1))
    embedded = encode_sample_prompts(adapter, components, config, torch.device("cpu"))
    assert len(runs) == len(prompts) + 1
    assert list(embedded) == [(prompt, "") for prompt in prompts]
    negatives = [e["negative_prompt_embeds"] for e in embedded.values()]
    assert all(torch.equal(n, negatives[0]) for n in negatives)
    positives = [e["prompt_embeds"] for e in embedded.values()]
    assert not torch.equal(positives[0], positives[1])
