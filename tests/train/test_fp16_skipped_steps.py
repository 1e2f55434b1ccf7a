"""Steps fp16's gradient scaler skips (inf or NaN gradients) are said: counted on the run's last lines, and a run
whose every step is skipped stops with what to do, instead of training nothing behind a loss plot that looks alive.

fp16 mixed precision needs a GPU; on the CPU the run gets the scaler a GPU run has (torch's GradScaler for the
CPU) and its LoRA's gradients are made inf where the test says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.runs.events import Error, RunFinished, Step
from studio.core.runs.records.outcome import outcome_line
from studio.train.progress.skipped_steps import SKIPPED_IN_A_ROW_LIMIT

torch = pytest.importorskip("torch")


@pytest.fixture
def inf_gradients(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The run gets a gradient scaler; its LoRA's gradients are inf in the micro-batches whose numbers (counted
    from 1) the returned list holds."""
    from studio.train import runtime
    from studio.train.loop import Trainer

    made = runtime.make_accelerator
    bad: list[int] = []
    seen = [0]

    def with_scaler(config: Any) -> Any:
        accelerator = made(config)
        accelerator.scaler = torch.amp.GradScaler("cpu")
        return accelerator

    prepare, loss = Trainer._prepare_models, Trainer._loss

    def hooked(self: Trainer) -> None:
        prepare(self)
        for param in self.trainable[0]:
            param.register_hook(lambda grad: torch.full_like(grad, float("inf")) if seen[0] in bad else grad)

    def counted(self: Trainer, *args: Any) -> Any:
        seen[0] += 1
        return loss(self, *args)

    monkeypatch.setattr(runtime, "make_accelerator", with_scaler)
    monkeypatch.setattr(Trainer, "_prepare_models", hooked)
    monkeypatch.setattr(Trainer, "_loss", counted)
    return bad


def test_a_run_whose_every_step_is_skipped_stops_and_says_to_use_bf16(make_config, run_training, events_of,
                                                                      inf_gradients, tmp_path: Path) -> None:
    inf_gradients.extend(range(1, 1000))
    config = make_config("sd15")
    config.training.max_steps = SKIPPED_IN_A_ROW_LIMIT + 5
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code != 0
    error = next(e for e in events if isinstance(e, Error))
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "failed"
    # Stopped at the first read-back of the losses (about twice a second) with enough skipped steps in a row.
    last = finished.step
    assert SKIPPED_IN_A_ROW_LIMIT <= last <= config.training.max_steps and finished.skipped_steps == last
    assert error.kind == "nan"
    assert f"fp16 mixed precision skipped every optimizer step from step 1 to {last}" in error.message, error.message
    assert "trained nothing" in error.message and "bf16" in error.hint
    # The steps before the stop are on the plot, with the finite loss that looked alive.
    assert [e.step for e in events if isinstance(e, Step)] == list(range(1, last + 1))
    assert f"run failed at step {last}: nan: fp16 mixed precision skipped" in outcome_line(run_dir, 1)


def test_a_run_that_skipped_some_steps_says_how_many(make_config, run_training, events_of, inf_gradients,
                                                     tmp_path: Path, capsys) -> None:
    inf_gradients.extend([1, 3])  # the micro-batches of steps 1 and 3 (batch 2, no accumulation)
    config = make_config("sd15")
    config.training.max_steps = 4
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    finished = events_of(run_dir)[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.skipped_steps == 2
    said = "fp16 skipped 2 steps (inf or NaN gradients: the weights stayed as they were"
    assert said in outcome_line(run_dir, 0)
    assert f"run completed at step 4; {said}" in capsys.readouterr().out  # the trainer's own last line
