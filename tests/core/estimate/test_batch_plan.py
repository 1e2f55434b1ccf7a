"""The largest batch that fits a card, and the two ways to use it (same effective batch, or fill the card)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram, fit
from studio.core.estimate.plans.batch_plan import MAX_BATCH, largest_batch, plan_batch
from studio.core.hardware.machine.probe import load_hardware


def config(**training: Any) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"family": "sdxl", "base": "m"}, "dataset": {"resolution": 1024},
        "training": {"mixed_precision": "bf16", "cache_latents": True, "cache_text_embeddings": True, **training},
    })


def _verdict(cfg: TrainConfig, profile: str, batch: int) -> str:
    gpu = load_hardware(profile).gpus[0]
    candidate = cfg.model_copy(deep=True)
    candidate.training.batch_size = batch
    return fit(estimate_vram(candidate, gpu), gpu)


@pytest.mark.parametrize("profile", ["rtx3060-12gb", "rtx4090-24gb", "a100-80gb"])
def test_the_largest_batch_fits_and_one_more_does_not(profile: str) -> None:
    cfg = config(batch_size=1, gradient_checkpointing=True)
    largest, mb = largest_batch(cfg, load_hardware(profile).gpus[0])
    assert largest >= 1 and mb > 0
    assert _verdict(cfg, profile, largest) == "fits"
    if largest < MAX_BATCH:
        assert _verdict(cfg, profile, largest + 1) != "fits"


def test_a_bigger_card_takes_a_bigger_batch() -> None:
    cfg = config(gradient_checkpointing=True)
    sizes = [largest_batch(cfg, load_hardware(p).gpus[0])[0] for p in ("rtx3060-12gb", "rtx4090-24gb", "a100-80gb")]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_the_effective_batch_is_kept_with_accumulation() -> None:
    # Effective batch 32 on a 24 GB card that fits fewer than 32 at 1024 px: split into batch x accumulation.
    # (8 fits now: the caching phase no longer holds the UNet beside the encoders and the VAE's batch.)
    cfg = config(batch_size=1, gradient_accumulation=32, gradient_checkpointing=True)
    plan = plan_batch(cfg, load_hardware("rtx4090-24gb").gpus[0])
    assert plan is not None and 1 <= plan.largest < 32
    assert plan.keep_batch * plan.keep_accumulation == 32 and plan.keep_batch <= plan.largest
    assert f"batch {plan.keep_batch} x gradient accumulation {plan.keep_accumulation}" in plan.describe()


def test_filling_the_card_scales_the_learning_rate_by_the_square_root() -> None:
    cfg = config(batch_size=2, learning_rate=1e-4, gradient_checkpointing=True)
    plan = plan_batch(cfg, load_hardware("a100-80gb").gpus[0])
    assert plan is not None and plan.largest > 2
    assert plan.fill_learning_rate == pytest.approx(1e-4 * math.sqrt(plan.largest / 2))
    assert plan.badge == f"batch {plan.largest} fits"
    assert f"learning rate 0.0001 -> {plan.fill_learning_rate:.3g}" in plan.describe()


def test_prodigy_keeps_its_learning_rate() -> None:
    cfg = config(batch_size=1, optimizer="prodigy", learning_rate=1.0, gradient_checkpointing=True)
    plan = plan_batch(cfg, load_hardware("a100-80gb").gpus[0])
    assert plan is not None and plan.fill_learning_rate == 1.0 and "Prodigy" in plan.scaling


def test_a_card_too_small_says_so() -> None:
    cfg = TrainConfig.model_validate({"model": {"family": "sdxl", "base": "m"}, "method": {"kind": "dreambooth"},
                                      "dataset": {"resolution": 1024}, "training": {"mixed_precision": "bf16"}})
    plan = plan_batch(cfg, load_hardware("rtx3060-12gb").gpus[0])
    assert plan is not None and plan.largest == 0
    assert plan.badge == "batch 1 does not fit" and "does not fit" in plan.describe()


def test_no_plan_for_a_cpu_run() -> None:
    assert plan_batch(config(), None) is None
    on_cpu = config().model_copy(update={"launch": config().launch.model_copy(update={"cpu": True})})
    assert plan_batch(on_cpu, load_hardware("a100-80gb").gpus[0]) is None


def test_the_estimate_command_prints_the_plan(tmp_path, capsys) -> None:
    import json

    from studio.cli import main as cli_main
    from studio.core.config.files.toml_file import save_config

    cfg = config(batch_size=1, gradient_accumulation=2, gradient_checkpointing=True)
    save_config(cfg, tmp_path / "studio.toml")
    expected = plan_batch(cfg, load_hardware("a100-80gb").gpus[0])
    assert expected is not None
    assert cli_main(["estimate", str(tmp_path / "studio.toml"), "--hardware", "a100-80gb"]) == 0
    out = capsys.readouterr().out
    assert f"Batch: batch {expected.largest} fits" in out and "square-root scaling" in out
    assert cli_main(["estimate", str(tmp_path / "studio.toml"), "--hardware", "a100-80gb", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["batch_plan"]
    assert data["largest_batch"] == expected.largest and data["keep_batch"] * data["keep_accumulation"] == 2
