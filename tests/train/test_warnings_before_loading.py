"""What a run says before its model loads, as the person reads it in the run's warnings."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.schema import ModelSection, SamplingSection, TrainConfig

torch = pytest.importorskip("torch")


def _said(config: TrainConfig) -> list[tuple[Any, ...]]:
    from studio.train.runtime import warn_before_loading

    said: list[tuple[Any, ...]] = []
    warn_before_loading(config, torch.device("cpu"), None, lambda *args: said.append(args))
    return said


def test_samples_asked_for_without_prompts_are_named() -> None:
    """every_n_steps set and no prompt: the run made no samples and said nothing."""
    model = ModelSection(family="sd15", base="x")
    assert _said(TrainConfig(model=model, sampling=SamplingSection(every_n_steps=100))) == [(
        "sampling.every_n_steps = 100 with no sampling.prompts: this run makes no samples", None,
        "add sample prompts (the Train page's Sample settings), or set every_n_steps to 0")]
    assert _said(TrainConfig(model=model, sampling=SamplingSection(every_n_steps=100, prompts=["a cat"]))) == []
    assert _said(TrainConfig(model=model)) == []
