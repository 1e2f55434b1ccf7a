"""training.fill_card: a run starts with the fastest settings the estimate says fit the card, and says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram, fit
from studio.core.estimate.plans.batch_plan import largest_batch
from studio.core.estimate.plans.card_fill import fill_card
from studio.core.hardware.machine.probe import load_hardware


def config(**training: Any) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"family": "sdxl", "base": "m"}, "dataset": {"resolution": 1024},
        "sampling": {"every_n_steps": 200}, "output": {"save_every_n_steps": 500},
        "training": {"mixed_precision": "bf16", "cache_latents": True, "cache_text_embeddings": True,
                     "batch_size": 1, "max_steps": 2000, "lr_scheduler": "cosine", "lr_warmup_steps": 100,
                     "learning_rate": 1e-4,
                     "gradient_checkpointing": True, "fill_card": True, **training},
    })


def gpu(profile: str) -> Any:
    return load_hardware(profile).gpus[0]


def test_an_80_gb_card_trains_a_12_gb_preset_at_a_full_batch_without_checkpointing() -> None:
    cfg = config()
    card = gpu("a100-80gb")
    filled = fill_card(cfg, card)
    t = filled.config.training
    assert t.gradient_checkpointing is False
    assert t.batch_size > 1 and t.gradient_accumulation == 1
    assert t.batch_size == largest_batch(cfg.model_copy(update={"training": cfg.training.model_copy(
        update={"gradient_checkpointing": False})}), card)[0]
    assert fit(estimate_vram(filled.config, card), card) == "fits"  # with the estimate's margin, not "tight"
    # The same images seen, sampled and saved after, at the larger batch; the learning rate by the square root.
    assert t.max_steps == -(-2000 // t.batch_size)
    assert t.lr_warmup_steps == -(-100 // t.batch_size)
    assert filled.config.sampling.every_n_steps == -(-200 // t.batch_size)
    assert filled.config.output.save_every_n_steps == -(-500 // t.batch_size)
    assert t.learning_rate == pytest.approx(1e-4 * t.batch_size ** 0.5)
    text = filled.describe()
    assert text.startswith("training.fill_card: gradient checkpointing off")
    assert f"batch 1 -> {t.batch_size}" in text and "max_steps 2000 -> " in text and "square-root" in text


def test_the_text_encoders_own_learning_rate_scales_with_the_denoisers() -> None:
    """A recipe that trains the text encoder at half the denoiser's rate keeps that ratio at the larger batch."""
    data = config(cache_text_embeddings=False).model_dump()
    data["method"]["train_text_encoder"] = True
    data["training"]["text_encoder_lr"] = 5e-5
    cfg = TrainConfig.model_validate(data)
    filled = fill_card(cfg, gpu("a100-80gb"))
    t = filled.config.training
    assert t.batch_size > 1
    assert t.text_encoder_lr == pytest.approx(t.learning_rate / 2)
    assert f"the text encoders' 5e-05 -> {t.text_encoder_lr:.3g}" in filled.describe()
    assert fill_card(config(), gpu("a100-80gb")).config.training.text_encoder_lr is None  # unset: learning_rate's


@pytest.mark.parametrize("profile", ["rtx4060-8gb", "rtx3060-12gb", "rtx4090-24gb", "h200-141gb"])
def test_on_every_card_the_choice_fits_and_is_never_slower_than_the_preset(profile: str) -> None:
    cfg = config()
    card = gpu(profile)
    filled = fill_card(cfg, card)
    t = filled.config.training
    assert t.batch_size >= 1 and (t.gradient_checkpointing is False or t.gradient_checkpointing == cfg.training.gradient_checkpointing)
    if filled.changes:
        assert fit(estimate_vram(filled.config, card), card) == "fits"
        assert t.max_steps * t.batch_size >= 2000  # no image of the preset's run is left out
    else:
        assert filled.config == cfg and "the config's settings are kept" in filled.describe()


def test_off_or_without_a_gpu_nothing_changes() -> None:
    off = config(fill_card=False)
    assert fill_card(off, gpu("a100-80gb")).config == off and fill_card(off, gpu("a100-80gb")).describe() == ""
    on = config()
    none = fill_card(on, None)
    assert none.config == on and none.describe() == "training.fill_card: no GPU to fill; the config's settings are kept"


def test_a_run_started_with_fill_card_says_what_it_chose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.config.files.paths import resolve_paths
    from studio.core.estimate.plans.card_fill import filled_for_launch
    from studio.core.runs.launch import prepare_run

    monkeypatch.setenv("STUDIO_HARDWARE", "a100-80gb")  # the card the studio plans for
    cfg = config()
    cfg.output.dir = str(tmp_path / "runs")
    filled = filled_for_launch(resolve_paths(cfg, tmp_path))
    plan = prepare_run(filled.config, note=filled.describe())
    assert plan.config.training.batch_size > 1 and plan.note.startswith("training.fill_card: ")
    assert (plan.run_dir / "console.log").read_text(encoding="utf-8") == f"[studio] {plan.note}\n"
    assert f"batch_size = {plan.config.training.batch_size}" in (plan.run_dir / "config.toml").read_text()


def test_studio_train_run_prints_the_choice_before_the_trainer_starts(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The command is the GUI's; the trainer itself is not started here (its launch is stubbed)."""
    import argparse

    from studio.cli.runs import run as run_command
    from studio.core.config.files.toml_file import save_config

    monkeypatch.setenv("STUDIO_HARDWARE", "h200-141gb")
    cfg = config()
    cfg.output.dir = str(tmp_path / "runs")
    (tmp_path / "data").mkdir()
    cfg.dataset.concepts = []
    path = tmp_path / "studio.toml"
    save_config(cfg, path)
    monkeypatch.setattr(run_command, "preflight_headless", lambda config: ([], []))
    monkeypatch.setattr(run_command, "python_problem", lambda config: None)
    started: list[Path] = []
    monkeypatch.setattr(run_command, "follow_training", lambda command, run_dir: started.append(run_dir) or 0)
    assert run_command.run(argparse.Namespace(config=str(path), processes=None)) == 0
    out = capsys.readouterr().out
    assert "training.fill_card: gradient checkpointing off" in out and "NVIDIA H200" in out
    assert (started[0] / "console.log").read_text(encoding="utf-8").startswith("[studio] training.fill_card: ")
