"""The learning rate: what the step events show is what the optimizer stepped with, and optimizers whose
learning rate means something else are warned of."""

from __future__ import annotations

import pytest

from studio.core.config.schema import OutputSection, TrainingSection
from studio.core.runs.events import Step

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
