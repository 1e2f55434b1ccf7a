"""training.ema: the average moves every ema_every steps, samples use it when asked, a full fine-tune
writes it as a second model folder (and single file), and the settings that need it are refused without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from studio.core.config.schema import MethodSection, OutputSection, SamplingSection, TrainingSection

torch = pytest.importorskip("torch")


def _average(every: int, on_cpu: bool = False) -> tuple[Any, Any]:
    from studio.core.config.schema import ModelSection, TrainConfig
    from studio.train.weights.ema import WeightAverage

    layer = torch.nn.Linear(3, 2)
    config = TrainConfig(model=ModelSection(family="sd15", base="x"),
                         training=TrainingSection(ema=True, ema_decay=0.5, ema_every=every, ema_on_cpu=on_cpu))
    return layer, WeightAverage(list(layer.parameters()), config, torch.device("cpu"))


def test_the_average_moves_every_n_steps_and_swaps_in_exactly() -> None:
    layer, average = _average(every=2)
    start = layer.weight.detach().clone()
    for step in range(1, 5):
        with torch.no_grad():
            layer.weight.add_(1.0)
        average.update(step)
    assert average.average.optimization_step == 2  # steps 2 and 4
    # Update 1 copies the weights (start + 2), update 2 moves half way with the warm-up's decay 2/11.
    expected = (start + 2) * (2 / 11) + (start + 4) * (9 / 11)
    trained = layer.weight.detach().clone()
    with average.applied():
        torch.testing.assert_close(layer.weight.detach(), expected)
    assert torch.equal(layer.weight.detach(), trained)  # the trained weights back, bit for bit


def test_an_average_kept_on_the_cpu_visits_the_gpu_a_piece_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """training.ema_on_cpu is there to save GPU memory: its update brings a piece of the average at a time
    (the whole one with the update's temporary took twice the trained weights), and averages exactly as an
    update of the whole does."""
    from studio.core.config.schema import ModelSection, TrainConfig
    from studio.train.weights import ema

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
    params = list(model.parameters())  # 4160 + 2080 + 264 weights: 16,640 + 8,320 + 1,056 bytes
    limit = 20_000
    monkeypatch.setattr(ema, "PIECE_BYTES", limit)

    def average(on_cpu: bool, device: Any) -> Any:
        config = TrainConfig(model=ModelSection(family="sd15", base="x"),
                             training=TrainingSection(ema=True, ema_decay=0.9, ema_on_cpu=on_cpu))
        return ema.WeightAverage(params, config, device)

    whole = average(False, torch.device("cpu"))
    kept = average(True, torch.device("cpu", 0))  # a device other than its home: the visits happen
    visits: list[int] = []
    step = kept.average.step

    def counted(parameters: Any) -> None:
        visits.append(sum(s.numel() * s.element_size() for s in kept.average.shadow_params))
        step(parameters)

    kept.average.step = counted
    for number in range(1, 4):
        with torch.no_grad():
            for param in params:
                param.add_(torch.randn_like(param))
        whole.update(number)
        kept.update(number)
    assert max(visits) <= limit and len(visits) == 3 * 2  # two pieces an update, never the whole average
    assert kept.average.optimization_step == whole.average.optimization_step == 3
    assert all(torch.equal(a, b) for a, b in zip(kept.average.shadow_params, whole.average.shadow_params,
                                                  strict=True))
    assert all(s.device == torch.device("cpu") for s in kept.average.shadow_params)


def test_the_settings_that_need_the_average_are_refused_without_it() -> None:
    from studio.core.config.schema import ModelSection, TrainConfig

    model = ModelSection(family="sd15", base="x")
    for key, value in (("ema_decay", 0.9), ("ema_every", 5), ("ema_on_cpu", True)):
        with pytest.raises(ValidationError, match=f"acts only with training.ema = true.*training.{key}"):
            TrainConfig(model=model, training=TrainingSection(**{key: value}))
    with pytest.raises(ValidationError, match="this run makes no samples"):
        TrainConfig(model=model, training=TrainingSection(ema=True, ema_for_samples=True))


def test_samples_are_made_with_the_average_when_asked(make_config, run_training, monkeypatch, tmp_path) -> None:
    import studio.train.loop as loop

    seen: list[tuple[float, float]] = []

    def record(adapter: Any, components: Any, plan: Any, run_dir: Path, step: int, reporter: Any) -> None:
        weights = sum(float(p.detach().double().sum()) for p in components.denoiser.parameters() if p.requires_grad)
        seen.append((weights, trainer_of["ema"].checksum()))

    trainer_of: dict[str, Any] = {}
    original_setup = loop.Trainer.setup

    def setup(self: Any) -> None:
        original_setup(self)
        trainer_of["ema"] = self.ema

    monkeypatch.setattr(loop, "make_samples", record)
    monkeypatch.setattr(loop.Trainer, "setup", setup)
    for for_samples in (True, False):
        seen.clear()
        config = make_config(
            training=TrainingSection(batch_size=2, max_steps=3, learning_rate=1e-2, seed=1, ema=True, ema_decay=0.9,
                                     ema_for_samples=for_samples),
            sampling=SamplingSection(every_n_steps=3, prompts=["a red circle"], steps=1),
        )
        code, _ = run_training(config, tmp_path / str(for_samples))
        assert code == 0 and len(seen) == 1
        weights, average = seen[0]
        assert (abs(weights - average) < 1e-6 * max(1.0, abs(average))) == for_samples


@pytest.mark.slow
def test_a_full_fine_tune_writes_its_average_as_a_second_model_folder(make_config, run_training,
                                                                        tmp_path) -> None:
    from safetensors.torch import load_file

    config = make_config(
        method=MethodSection(kind="dreambooth"),
        training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1, ema=True, ema_decay=0.9,
                                 ema_on_cpu=True),
        output=OutputSection(dir=str(tmp_path / "runs"), save_precision="fp32"),
    )
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    output = run_dir / "output"
    assert (output / "ema" / "model_index.json").is_file()
    raw = load_file(str(output / "unet" / "diffusion_pytorch_model.safetensors"))
    averaged = load_file(str(output / "ema" / "unet" / "diffusion_pytorch_model.safetensors"))
    assert raw.keys() == averaged.keys()
    assert sum(not torch.equal(raw[k], averaged[k]) for k in raw) > len(raw) // 2


def test_a_full_fine_tune_asked_for_single_files_writes_its_average_as_one_too(make_config, run_training,
                                                                              events_of, tmp_path) -> None:
    """A person who loads checkpoints as single files (A1111, Forge, ComfyUI) gets the average as one as well,
    beside the raw one, saying what it is: they had the raw weights' file only, and a folder their UI cannot load."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from studio.core.runs.events import RunFinished

    config = make_config(
        method=MethodSection(kind="dreambooth", train_text_encoder=True),
        training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-3, seed=1, ema=True, ema_decay=0.5),
        output=OutputSection(dir=str(tmp_path / "runs"), name="shapes", formats=["diffusers", "single_file"],
                             save_precision="fp16"),
    )
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    output = run_dir / "output"
    raw, averaged = output / "shapes.safetensors", output / "shapes-ema.safetensors"
    finished = events_of(run_dir)[-1]
    assert isinstance(finished, RunFinished) and str(averaged) in finished.outputs
    with safe_open(str(averaged), framework="pt") as handle:
        meta = handle.metadata()
    assert meta["modelspec.architecture"] == "stable-diffusion-v1" and meta["modelspec.title"] == "shapes (EMA)"
    raw_state, ema_state = load_file(str(raw)), load_file(str(averaged))
    assert raw_state.keys() == ema_state.keys() and {t.dtype for t in ema_state.values()} == {torch.float16}
    # The average's UNet and text encoder, as the ema/ folder holds them; the VAE (not trained) as the raw file's.
    folder_unet = load_file(str(output / "ema" / "unet" / "diffusion_pytorch_model.safetensors"))
    assert torch.equal(ema_state["model.diffusion_model.input_blocks.0.0.weight"], folder_unet["conv_in.weight"])
    trained = [k for k in raw_state if k.startswith(("model.", "cond_stage_model."))]
    assert sum(not torch.equal(raw_state[k], ema_state[k]) for k in trained) > len(trained) // 2
    assert all(torch.equal(raw_state[k], ema_state[k]) for k in raw_state if k.startswith("first_stage_model."))


def test_a_resume_with_the_average_switched_on_since_says_so(make_config, run_training, events_of, stop_after,
                                                              tmp_path) -> None:
    """training.ema switched on in a stopped run's config.toml: the resume called every checkpoint damaged."""
    from studio.core.runs.events import Error

    stop_after(2)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=4, learning_rate=1e-3, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers"]))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    stop_after(None)
    toml = run_dir / "config.toml"
    text = toml.read_text(encoding="utf-8")
    assert "ema = false\n" in text
    toml.write_text(text.replace("ema = false\n", "ema = true\n", 1), encoding="utf-8")
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    (error,) = [e for e in events_of(run_dir) if isinstance(e, Error)]
    assert code != 0 and error.kind == "config" and "written without training.ema" in error.message
    assert "damaged" not in error.message + error.hint and str(toml) in error.hint
