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
    from studio.train.memory.placement import FrozenOffload

    config = make_config(training=CACHED, sampling=SAMPLING)
    seen = _watch(monkeypatch)
    code, run_dir = run_training(config, tmp_path / "offloaded")
    assert code == 0
    trainer, after = seen["trainer"], seen["after_setup"]
    assert after["offloaded"] == {"vae", "text_encoder_1"} and after["away"]
    assert after["vae"] == after["text_encoder"] == trainer.offload_device
    assert after["denoiser"] == trainer.accelerator.device  # the trained network stays
    # Samples start with everything parked (each stage brings back its own), and leave it parked.
    assert seen["sampling"] == [(True, trainer.offload_device, trainer.offload_device)]
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


def _place_on_record(module: torch.nn.Module, name: str, where: dict[str, str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`module.to(device)` records where the module went instead of moving it (there is one real device)."""
    where[name] = "cuda"

    def to(*args: Any, **kwargs: Any) -> torch.nn.Module:
        target = args[0] if args else kwargs.get("device")
        where[name] = torch.device(target).type
        return module

    monkeypatch.setattr(module, "to", to)


def test_samples_bring_back_the_encoders_then_the_vae_never_both(make_config, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.train.families import adapter_for
    from studio.train.memory.placement import FrozenOffload
    from studio.train.progress.reporting import Reporter
    from studio.train.samples import SamplingPlan, make_samples

    config = make_config("sdxl", training=CACHED, sampling=SAMPLING.model_copy(update={"prompts": ["a", "b"]}))
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    # The GPU is named, not used: every move is recorded by the spy and none is made.
    offload = FrozenOffload(torch.device("cuda"), offload_device=torch.device("cpu"))
    where: dict[str, str] = {}
    named = {"vae": components.vae, "text_encoder_1": components.text_encoders[0],
             "text_encoder_2": components.text_encoders[1]}
    for name, module in named.items():
        offload.add(name, module)
        _place_on_record(module, name, where, monkeypatch)
    offload.offload()
    assert where == dict.fromkeys(named, "cpu")
    stages: list[tuple[str, dict[str, str]]] = []
    for stage in ("sample_conditioning", "denoise", "decode"):
        original = getattr(adapter, stage)

        def spy(*args: Any, _stage: str = stage, _original: Any = original) -> Any:
            stages.append((_stage, dict(where)))
            return _original(*args)

        monkeypatch.setattr(adapter, stage, spy)
    reporter = Reporter(tmp_path, active=True)
    paths = make_samples(adapter, components, SamplingPlan(offload), tmp_path, 2, reporter)
    reporter.close()
    assert len(paths) == 2 and all(p.is_file() for p in paths)
    encoders_only = {"vae": "cpu", "text_encoder_1": "cuda", "text_encoder_2": "cuda"}
    vae_only = {"vae": "cuda", "text_encoder_1": "cpu", "text_encoder_2": "cpu"}
    assert stages == [("sample_conditioning", encoders_only)] * 2 + [("denoise", dict.fromkeys(named, "cpu"))] * 2 \
        + [("decode", vae_only)] * 2
    assert where == dict.fromkeys(named, "cpu")  # all parked again for the next steps


def test_offload_moves_the_modules_and_resident_brings_them_back() -> None:
    from studio.train.memory.placement import FrozenOffload

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
    home.add("vae", torch.nn.Linear(2, 2))
    home.offload()
    with home.resident(["vae", "never_added"]):
        assert home.parked == {"text_encoder_1"}  # only what was asked for comes back
    assert home.parked == {"text_encoder_1", "vae"}


def test_a_module_that_fails_to_come_leaves_none_behind_on_the_device() -> None:
    """A sample whose text encoder runs the GPU out of memory half-way to it is survived; every module brought
    for it goes back (not one left beside the training, nor half of one there for the next sample)."""
    from studio.train.memory.placement import FrozenOffload

    class Moving(torch.nn.Linear):
        def __init__(self, fails: bool) -> None:
            super().__init__(2, 2)
            self.fails, self.moves = fails, []

        def to(self, *args: Any, **kwargs: Any) -> Any:
            self.moves.append(args[0])
            if self.fails and args[0] == device:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.50 GiB")
            return super().to(*args, **kwargs)

    device = torch.device("cpu", 0)  # told apart from the offload device ("cpu") by the moves recorded
    offload = FrozenOffload(device)
    modules = {"text_encoder_1": Moving(False), "text_encoder_2": Moving(True)}
    for name, module in modules.items():
        offload.add(name, module)
    offload.offload()
    with pytest.raises(torch.OutOfMemoryError), offload.resident():
        pass
    assert offload.parked == set(modules)
    assert all(module.moves[-1] == offload.offload_device for module in modules.values())
    with offload.resident(["text_encoder_1"]):  # the next sample brings it again
        assert modules["text_encoder_1"].moves[-1] == device
