"""With caches filled, the VAE and the frozen text encoders leave the GPU until samples need them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from studio.core.config.schema import SamplingSection, TrainingSection

torch = pytest.importorskip("torch")

CACHED = TrainingSection(batch_size=2, max_steps=2, seed=3, cache_latents=True, cache_text_embeddings=True)
SAMPLING = SamplingSection(every_n_steps=2, prompts=["a red circle"], steps=2, guidance=2.0, size=64)


def _device(module: Any) -> torch.device:
    return next(module.parameters()).device


def _watch(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Record where the frozen modules are after setup and while samples are made."""
    import studio.train.loop as loop

    seen: dict[str, Any] = {"sampling": []}
    setup, make_samples = loop.Trainer.setup, loop.make_samples

    def watched_setup(self: Any) -> None:
        setup(self)
        seen["trainer"] = self
        c = self.components
        seen["after_setup"] = {"offloaded": set(self.offload.modules), "away": self.offload.away,
                               "vae": _device(c.vae), "text_encoder": _device(c.text_encoders[0]),
                               "denoiser": _device(c.denoiser)}

    def watched_samples(adapter: Any, components: Any, *args: Any) -> list[Path]:
        trainer = seen["trainer"]
        seen["sampling"].append((trainer.offload.away, _device(components.vae), _device(components.text_encoders[0])))
        return make_samples(adapter, components, *args)

    monkeypatch.setattr(loop.Trainer, "setup", watched_setup)
    monkeypatch.setattr(loop, "make_samples", watched_samples)
    return seen


def test_cached_runs_park_the_frozen_modules_and_sample_the_same(
    make_config, run_training, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from studio.train.placement import FrozenOffload

    config = make_config(training=CACHED, sampling=SAMPLING)
    seen = _watch(monkeypatch)
    code, run_dir = run_training(config, tmp_path / "offloaded")
    assert code == 0
    trainer, after = seen["trainer"], seen["after_setup"]
    assert after["offloaded"] == {"vae", "text_encoder_1"} and after["away"]
    assert after["vae"] == after["text_encoder"] == trainer.offload_device
    assert after["denoiser"] == trainer.accelerator.device  # the trained network stays
    # Brought back for the samples, parked again after them.
    device = trainer.accelerator.device
    assert seen["sampling"] == [(False, device, device)]
    assert trainer.offload.away and _device(trainer.components.vae) == trainer.offload_device

    monkeypatch.setattr(FrozenOffload, "offload", lambda self: None)  # everything stays where it was loaded
    code, plain_dir = run_training(config, tmp_path / "resident")
    assert code == 0 and not seen["trainer"].offload.away
    sample = "samples/step-000002-0.png"
    offloaded = np.asarray(Image.open(run_dir / sample))
    assert offloaded.std() > 0  # a real image, not a blank
    assert np.array_equal(offloaded, np.asarray(Image.open(plain_dir / sample)))


def test_without_caches_nothing_is_parked(make_config, run_training, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _watch(monkeypatch)
    code, _ = run_training(make_config(training=TrainingSection(batch_size=2, max_steps=1, seed=3)), tmp_path)
    assert code == 0
    assert seen["after_setup"]["offloaded"] == set() and not seen["after_setup"]["away"]


def test_offload_moves_the_modules_and_resident_brings_them_back() -> None:
    from studio.train.placement import FrozenOffload

    parked = FrozenOffload(torch.device("cpu"), offload_device=torch.device("meta"))
    vae = torch.nn.Linear(2, 2)
    parked.add("vae", vae)
    parked.offload()
    assert parked.away and vae.weight.device == torch.device("meta")  # the move is real, not a no-op

    home = FrozenOffload(torch.device("cpu"))
    encoder = torch.nn.Linear(2, 2)
    home.add("text_encoder_1", encoder)
    home.offload()
    with home.resident():
        assert not home.away and encoder.weight.device == home.device
    assert home.away
