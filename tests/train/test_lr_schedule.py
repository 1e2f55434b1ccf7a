"""The learning rate: what the step events show is what the optimizer stepped with, and optimizers whose
learning rate means something else are warned of."""

from __future__ import annotations

import re

import pytest

from studio.core.config.schema import OutputSection, TrainingSection
from studio.core.runs.events import RunWarning, Step

torch = pytest.importorskip("torch")


def test_each_step_event_shows_the_learning_rate_its_step_used(make_config, run_training, events_of,
                                                                tmp_path) -> None:
    """A linear decay over 4 steps updates with 100 %, 75 %, 50 % and 25 % of the rate; the event of step 1
    showed the rate of step 2, and the last step's showed 0 (a rate no step used)."""
    config = make_config(training=TrainingSection(batch_size=2, max_steps=4, learning_rate=1e-3,
                                                  lr_scheduler="linear", seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers"]))
    code, run_dir = run_training(config, tmp_path / "a")
    events = events_of(run_dir)
    assert code == 0, [e for e in events if e.type == "error"]
    shown = [(e.step, e.lr) for e in events if isinstance(e, Step)]
    assert shown == [(1, pytest.approx(1e-3)), (2, pytest.approx(7.5e-4)), (3, pytest.approx(5e-4)),
                     (4, pytest.approx(2.5e-4))]


@pytest.mark.parametrize(("learning_rate", "text_encoder_lr", "said"), [
    (1e-4, None, ["training.learning_rate = 0.0001"]),
    (1.0, 1e-5, ["training.text_encoder_lr = 1e-05"]),
    (1.0, None, []),
])
def test_prodigy_with_an_adamw_sized_learning_rate_is_warned_of(learning_rate: float, text_encoder_lr: float | None,
                                                                said: list[str]) -> None:
    """Prodigy multiplies the step size it finds by the learning rate: 1e-4 (the default, right for AdamW)
    trains a LoRA that learned next to nothing, with nothing said."""
    pytest.importorskip("prodigyopt")
    from studio.train.optim import build_optimizer, param_groups

    training = TrainingSection(optimizer="prodigy", learning_rate=learning_rate, text_encoder_lr=text_encoder_lr)
    warnings: list[str] = []
    groups = param_groups([torch.nn.Parameter(torch.zeros(2))], [torch.nn.Parameter(torch.zeros(2))], training)
    build_optimizer(groups, training, cuda=False, warn=warnings.append)
    assert [key for key in said if any(key in w for w in warnings)] == said
    assert bool(warnings) == bool(said)
    assert all("set the learning rate to 1.0" in w for w in warnings)


def test_a_warm_up_as_long_as_the_run_is_warned_of(make_config, run_training, events_of, tmp_path) -> None:
    """A run given in epochs learns its length only as it starts: a warm-up of 10 steps over a run of 4 ended
    at 30 % of the learning rate, with nothing said."""
    config = make_config(training=TrainingSection(batch_size=2, epochs=1, learning_rate=1e-3,
                                                  lr_scheduler="cosine", lr_warmup_steps=10, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers"]))
    code, run_dir = run_training(config, tmp_path / "a")
    events = events_of(run_dir)
    assert code == 0, [e for e in events if e.type == "error"]
    steps = [e for e in events if isinstance(e, Step)]
    assert len(steps) < 10 and steps[-1].lr < 1e-3
    said = [e.message for e in events if isinstance(e, RunWarning) and "lr_warmup_steps" in e.message]
    assert said == [f"training.lr_warmup_steps = 10 is not below this run's {len(steps)} steps: the learning rate "
                    "rises for the whole run and never reaches training.learning_rate (0.001); lower the warm-up "
                    "(a tenth of the steps is usual) or train longer"]


def _rates(training: TrainingSection, steps: int) -> tuple[list[float], list[str]]:
    from studio.train.optim import build_scheduler

    said: list[str] = []
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=training.learning_rate)
    scheduler = build_scheduler(optimizer, training, steps, said.append)
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return rates, said


def test_cosine_with_restarts_restarts_lr_cycles_times_and_polynomial_follows_lr_power() -> None:
    """cosine_with_restarts was given one cycle (the cosine schedule) and polynomial a power of 1 (the linear
    schedule), whatever the person wanted from them."""
    rates, said = _rates(TrainingSection(learning_rate=1.0, lr_scheduler="cosine_with_restarts", lr_cycles=3), 12)
    assert [round(r, 3) for r in rates[::4]] == [1.0, 1.0, 1.0] and said == []  # back at the peak every 4 steps
    assert rates[3] < 0.2
    _, said = _rates(TrainingSection(learning_rate=1.0, lr_scheduler="cosine_with_restarts"), 12)
    assert said == ["training.lr_scheduler = \"cosine_with_restarts\" with training.lr_cycles = 1 never restarts (it "
                    "is the cosine schedule): set training.lr_cycles to the number of cycles, 3 say"]
    square, _ = _rates(TrainingSection(learning_rate=1.0, lr_scheduler="polynomial", lr_power=2.0), 4)
    assert square[2] == pytest.approx(0.25, abs=1e-6)  # (1 - 2/4)², where a straight line gives 0.5


def test_lr_cycles_and_lr_power_are_refused_beside_a_schedule_that_has_none() -> None:
    from pydantic import ValidationError

    from studio.core.config.schema import ModelSection, TrainConfig

    model = ModelSection(family="sd15", base="x").model_dump()
    with pytest.raises(ValidationError, match=re.escape("acts only with training.lr_scheduler = \"cosine_with_restarts\"")):
        TrainConfig.model_validate({"model": model, "training": {"lr_scheduler": "cosine", "lr_cycles": 3}})
    with pytest.raises(ValidationError, match=re.escape("acts only with training.lr_scheduler = \"polynomial\"")):
        TrainConfig.model_validate({"model": model, "training": {"lr_scheduler": "linear", "lr_power": 2.0}})
