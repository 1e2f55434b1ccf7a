"""Suggestions: each lowers the estimate, they come in order of quality cost, and the last fits."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.files.paths import NO_FOLDER, ResolvedConfig, resolve_paths
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram, fit
from studio.core.estimate.plans.fixes import STEPS, apply_changes, apply_suggestions, suggest_fixes
from studio.core.hardware.machine.probe import load_hardware


def config(data: dict[str, Any]) -> ResolvedConfig:
    return resolve_paths(TrainConfig.model_validate({"model": {"family": "sdxl", "base": "m"}, **data}), NO_FOLDER)


CASES = [
    ("rtx3060-12gb", config({"dataset": {"resolution": 1024}, "method": {"rank": 64},
                             "training": {"batch_size": 4, "mixed_precision": "fp16"}})),
    ("rtx3060-12gb", config({"model": {"family": "sd3", "base": "m", "use_t5": True},
                             "dataset": {"resolution": 1024}, "training": {"mixed_precision": "bf16"}})),
    ("rtx4090-24gb", config({"method": {"kind": "dreambooth"}, "dataset": {"resolution": 1024},
                             "training": {"batch_size": 2, "mixed_precision": "bf16"}})),
]


@pytest.mark.parametrize(("profile", "cfg"), CASES)
def test_suggestions_lower_the_estimate_and_the_last_fits(profile: str, cfg: TrainConfig) -> None:
    gpu = load_hardware(profile).gpus[0]
    assert fit(estimate_vram(cfg, gpu), gpu) == "does_not_fit"
    suggestions = suggest_fixes(cfg, gpu)
    assert suggestions
    order = [key for key, _, _ in STEPS]
    assert [order.index(s.key) for s in suggestions] == sorted(order.index(s.key) for s in suggestions)
    previous = estimate_vram(cfg, gpu).total_mb
    current = cfg
    for s in suggestions:
        current = apply_changes(current, s.changes)
        now = estimate_vram(current, gpu).total_mb
        assert now < previous, s.title
        assert now == pytest.approx(s.estimate.total_mb)
        assert s.description
        previous = now
    assert suggestions[-1].fit in ("fits", "tight")
    assert fit(estimate_vram(apply_suggestions(cfg, suggestions), gpu), gpu) != "does_not_fit"


def test_no_suggestion_when_it_fits() -> None:
    gpu = load_hardware("a100-80gb").gpus[0]
    assert suggest_fixes(config({"training": {"mixed_precision": "bf16"}}), gpu) == []


def test_cheapest_fix_first() -> None:
    gpu = load_hardware("rtx3060-12gb").gpus[0]
    cfg = config({"dataset": {"resolution": 1024}, "training": {"mixed_precision": "fp16"}})
    suggestions = suggest_fixes(cfg, gpu)
    assert suggestions[0].changes == {"training.cache_text_embeddings": True}
    assert all(s.key not in ("resolution", "rank") for s in suggestions)


def test_apply_changes_rejects_unknown_keys() -> None:
    with pytest.raises(KeyError, match=r"training\.nonsense"):
        apply_changes(config({}), {"training.nonsense": 1})


def test_a_prodigy_run_is_not_turned_into_adamw_at_prodigys_learning_rate() -> None:
    """Prodigy's learning rate (1.0) multiplies the step size it finds; 8-bit AdamW takes it as the step size
    itself, and the suggested run diverged at its first steps."""
    gpu = load_hardware("rtx3060-12gb").gpus[0]
    training = {"mixed_precision": "bf16", "gradient_checkpointing": True, "cache_latents": True,
                "cache_text_embeddings": True, "learning_rate": 1.0}
    cfg = config({"model": {"family": "sd15", "base": "m"}, "method": {"kind": "dreambooth"},
                  "training": {**training, "optimizer": "prodigy"}})
    assert fit(estimate_vram(cfg, gpu), gpu) == "does_not_fit"
    suggestions = suggest_fixes(cfg, gpu)
    assert "adamw8bit" not in [s.key for s in suggestions]
    fixed = apply_suggestions(cfg, suggestions)
    assert (fixed.training.optimizer, fixed.training.learning_rate) == ("prodigy", 1.0)
    # AdamW's own run is offered its 8-bit state.
    adamw = config({"model": {"family": "sd15", "base": "m"}, "method": {"kind": "dreambooth"},
                    "training": {**training, "learning_rate": 2e-6}})
    assert [s.changes for s in suggest_fixes(adamw, gpu)][:1] == [{"training.optimizer": "adamw8bit"}]
