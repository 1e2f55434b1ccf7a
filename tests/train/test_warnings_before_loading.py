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


@pytest.mark.parametrize(("capability", "training", "said"), [
    ((7, 5), {"mixed_precision": "bf16"}, ["training.mixed_precision = \"bf16\" on the Tesla T4 (compute capability "
                                           "7.5), which has no bf16 arithmetic: torch emulates it, slower than fp16 "
                                           "and often slower than fp32"]),
    ((7, 5), {"mixed_precision": "fp16"}, []),
    ((8, 6), {"mixed_precision": "bf16"}, []),
])
def test_bf16_on_a_gpu_without_it_is_named(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int],
                                           training: dict[str, Any], said: list[str]) -> None:
    """A T4 or an RTX 20 card given a bf16 preset: torch emulates bf16 there, and the run was several times
    slower than in fp16 without a word. (The CUDA calls are answered as such a card would; CPU-only here.)"""
    from studio.core.config.schema import TrainingSection
    from studio.train.runtime import warn_before_loading

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    config = TrainConfig(model=ModelSection(family="sd15", base="x"), training=TrainingSection(**training))
    warnings: list[tuple[Any, ...]] = []
    warn_before_loading(config, torch.device("cuda", 0), None, lambda *args: warnings.append(args))
    assert [w[0] for w in warnings if "bf16 arithmetic" in w[0]] == said
    assert all("fp16" in w[2] for w in warnings if "bf16 arithmetic" in w[0])
