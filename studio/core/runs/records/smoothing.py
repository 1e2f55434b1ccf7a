"""The smoothed loss line (TensorBoard's debiased exponential moving average), without Qt.

`ema` is incremental: a live run smooths only its new points. A replay's line is smoothed
once on the worker thread that reads the run (`SmoothedLoss`, for the plots' default
smoothing), so a 100,000-step run is not smoothed on the GUI thread when it is shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_SMOOTHING = 0.9  # the loss plot's slider starts here


@dataclass(frozen=True)
class SmoothedLoss:
    """The first `len(values)` loss points smoothed at `smoothing`, and the state to go on from."""

    smoothing: float
    values: np.ndarray
    state: tuple[float, int]

    @classmethod
    def of(cls, loss: np.ndarray, smoothing: float = DEFAULT_SMOOTHING) -> SmoothedLoss:
        values, state = ema(loss, smoothing)
        return cls(smoothing, values, state)


_EMA_BLOCK = 128


def ema(values: np.ndarray, smoothing: float, start: int = 0, state: tuple[float, int] = (0.0, 0),
        out: np.ndarray | None = None) -> tuple[np.ndarray, tuple[float, int]]:
    """Debiased exponential moving average (TensorBoard's smoothing), incremental from `start`.

    NaN points (a diverged step) are skipped so one bad step does not blank the line. The
    recurrence runs in blocks of 128 points, all in one matrix product (a replay of 100,000
    steps smooths in milliseconds, not a Python step per point on the GUI thread).
    """
    result = np.empty_like(values) if out is None else out
    acc, count = state
    new = np.asarray(values[start:], dtype=np.float64)
    if not len(new):
        return result, (acc, count)
    valid_mask = ~np.isnan(new)
    all_valid = bool(valid_mask.all())
    if smoothing >= 1:
        result[start : len(values)] = new
        return result, (acc, count + (len(new) if all_valid else int(valid_mask.sum())))
    kept = new if all_valid else new[valid_mask]
    running = np.empty(len(kept))
    if len(kept):
        # Within each block of 128 points, one product with the decay weights; then the value each
        # block starts from, carried across the blocks (a scalar step per block, not per point).
        lags = np.arange(_EMA_BLOCK)
        weights = np.tril((1 - smoothing) * smoothing ** np.maximum(lags[:, None] - lags[None, :], 0))
        carry = smoothing ** (lags + 1)
        blocks = -(-len(kept) // _EMA_BLOCK)
        padded = np.zeros(blocks * _EMA_BLOCK)
        padded[: len(kept)] = kept
        within = padded.reshape(blocks, _EMA_BLOCK) @ weights.T
        starts = np.empty(blocks)
        decay = float(carry[-1])
        for block, end in enumerate(within[:, -1].tolist()):
            starts[block] = acc
            acc = end + decay * acc
        within += carry[None, :] * starts[:, None]
        running = within.reshape(-1)[: len(kept)]
        acc = float(running[-1])
    if all_valid:  # the usual case: every point is its own latest valid point
        counts = np.arange(count + 1, count + len(new) + 1)
        accs = running
    else:
        seen = np.cumsum(valid_mask)
        counts = count + seen
        # The latest valid point at or before each point (none yet: the state's accumulator).
        accs = running[np.maximum(seen - 1, 0)] if len(kept) else np.full(len(new), state[0])
        accs[seen == 0] = state[0]
    smoothed = _debias(accs, counts, smoothing)
    result[start : len(values)] = smoothed
    return result, (acc, int(counts[-1]))


def _debias(accs: np.ndarray, counts: np.ndarray, smoothing: float) -> np.ndarray:
    """`accs / (1 - smoothing ** counts)`, NaN where no point was seen yet (count 0).

    Past the count where `smoothing ** count` is below 2^-60 the divisor is exactly 1.0 in
    float64, so the power is taken only over the first counts (the same numbers, a fraction
    of the work on a long run).
    """
    smoothed = accs.astype(np.float64, copy=True)
    limit = 1 if smoothing <= 0 else math.ceil(-60 * math.log(2) / math.log(smoothing)) + 1
    head = counts < limit  # counts only grow: a prefix
    n_head = int(np.count_nonzero(head))
    if n_head:
        with np.errstate(divide="ignore", invalid="ignore"):
            smoothed[:n_head] = accs[:n_head] / (1 - smoothing ** counts[:n_head].astype(np.float64))
        smoothed[:n_head][counts[:n_head] <= 0] = np.nan
    return smoothed
