"""Windows' spill of GPU memory into shared system memory is named while the run goes on, once, with
the memory, the slowdown and the driver setting that turns it into an out-of-memory error."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.schema import TrainingSection
from studio.core.runs.events import RankMemory, RunWarning, Step
from studio.train.memory.spill import DRIVER_SETTING, SpillWatch

torch = pytest.importorskip("torch")

CARD = "NVIDIA GeForce RTX 4090"


def _step(n: int, rate: float, reserved_mb: float | None) -> Step:
    return Step(step=n, epoch=0, loss=0.1, lr=1e-4, samples_per_s=rate,
                memory=[RankMemory(rank=0, device="cuda:0", allocated_mb=None, reserved_mb=reserved_mb,
                                   peak_mb=None, rss_mb=1000.0)])


def test_a_rank_holding_more_than_its_card_is_named_once_with_the_slowdown_and_the_driver_setting() -> None:
    watch = SpillWatch({"cuda:0": 24564.0}, {"cuda:0": CARD})
    assert watch.check([_step(1, 2.0, 20000), _step(2, 2.4, 23000)]) is None  # full, but on the card
    spilled = watch.check([_step(3, 0.3, 26000)])
    assert spilled is not None
    message, hint = spilled
    assert message.startswith(f"the trainer holds 25.4 GB on cuda:0 ({CARD}), which has 24.0 GB")
    assert "8.0x slower than earlier in this run (2.40 -> 0.30 images/s)" in message
    assert DRIVER_SETTING in hint and "lower the batch size" in hint
    assert watch.check([_step(4, 0.2, 27000)]) is None  # said once


def test_a_spill_from_the_first_steps_is_named_without_a_slowdown_it_cannot_know() -> None:
    watch = SpillWatch({"cuda:0": 8188.0})
    spilled = watch.check([_step(1, 0.5, 9000)])
    assert spilled is not None and "x slower" not in spilled[0] and "on cuda:0, which has 8.0 GB" in spilled[0]


def test_the_trainer_warns_in_its_events_when_a_step_reports_memory_past_the_card(
        make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's own step events carry the memory (made to report a 24 GB card's spill from step 3 on)."""
    import studio.train.loop as loop
    import studio.train.progress.step_meter as step_meter

    monkeypatch.setattr(loop, "watch_cards", lambda device: SpillWatch({"cuda:0": 24564.0}, {"cuda:0": CARD}))
    reported = step_meter.memory_of_ranks

    def on_a_full_card(rows: list[list[float]]) -> list[RankMemory]:
        step = len(seen) + 1
        seen.append(step)
        return [RankMemory(rank=m.rank, device="cuda:0", allocated_mb=None, reserved_mb=26000.0 if step >= 3 else 20000.0,
                           peak_mb=None, rss_mb=m.rss_mb) for m in reported(rows)]

    seen: list[int] = []
    monkeypatch.setattr(step_meter, "memory_of_ranks", on_a_full_card)
    code, run_dir = run_training(make_config(training=TrainingSection(batch_size=2, max_steps=4, seed=1)), tmp_path)
    assert code == 0
    warnings = [e for e in events_of(run_dir) if isinstance(e, RunWarning) and "shared system memory" in e.message]
    assert len(warnings) == 1
    assert f"on cuda:0 ({CARD}), which has 24.0 GB" in warnings[0].message and DRIVER_SETTING in warnings[0].hint
