"""The smoothed loss line: TensorBoard's debiased EMA, incremental, and smoothed once where a replay is read."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from studio.core.runs.events import RunStarted, Step
from studio.core.runs.records.run_model import replay_run
from studio.core.runs.records.smoothing import DEFAULT_SMOOTHING, ema


def _reference(values: list[float], smoothing: float) -> list[float]:
    """The recurrence a point at a time, as TensorBoard writes it (NaN points skipped)."""
    acc, count, out = 0.0, 0, []
    for value in values:
        if not math.isnan(value):
            acc = smoothing * acc + (1 - smoothing) * value
            count += 1
        out.append(acc / (1 - smoothing**count) if count else math.nan)
    return out


@pytest.mark.parametrize("smoothing", [0.0, 0.5, 0.9, 0.99])
def test_smoothing_in_pieces_matches_the_point_by_point_recurrence(smoothing: float) -> None:
    rng = np.random.default_rng(3)
    values = rng.random(3000) * 2
    values[:5] = np.nan  # a run whose first steps diverged: no line until a finite loss
    values[rng.random(3000) < 0.05] = np.nan
    expected = _reference(values.tolist(), smoothing)
    whole, _ = ema(values, smoothing)
    np.testing.assert_allclose(whole, expected, rtol=1e-12, atol=0, equal_nan=True)
    out, state, start = np.empty(3000), (0.0, 0), 0
    for end in (1, 7, 130, 1024, 2999, 3000):  # a live run: only the new points each time
        _, state = ema(values[:end], smoothing, start, state, out)
        start = end
    np.testing.assert_allclose(out, whole, rtol=1e-12, atol=0, equal_nan=True)  # blocks fall elsewhere: rounding only
    assert state[1] == int(np.count_nonzero(~np.isnan(values)))


def test_a_replay_is_smoothed_where_it_is_read(tmp_path: Path) -> None:
    lines = [RunStarted(config={}, world_size=1, total_steps=500, devices=["cpu"], time=1.0).to_json()]
    lines += [Step(step=i, epoch=1, loss=0.2 + (i % 9) / 50, lr=1e-4, time=1.0 + i).to_json() for i in range(1, 501)]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = replay_run(tmp_path).model
    prepared = model.smoothed_loss
    assert prepared is not None and prepared.smoothing == DEFAULT_SMOOTHING
    assert len(prepared.values) == 500
    np.testing.assert_allclose(prepared.values, _reference(model.loss.view().tolist(), 0.9), rtol=1e-12)
