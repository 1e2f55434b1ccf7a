"""A stopwatch per part of a run: each second of the trainer's wall time is counted in exactly one part.

Parts nest (a sample inside the steps, text encoding inside the caching): entering one pauses the
part it interrupts, so the totals add up to the wall time and no second is counted twice. Time no
part claims (setting up the optimizer, handing modules to accelerate) is "other". The totals go
on the `run_finished` event (studio.core.runs.records.phase_times shows them).

On a GPU the host runs ahead of the work it queues: without a wait at each boundary, the steps
queued before a sample would be counted in the sample. With `sync` (the device's synchronize),
every part is charged for the GPU work it queued; a boundary comes at a sample, a checkpoint or a
validation, never inside a step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from studio.core.runs.events import PhaseTime

OTHER = "other"


class PhaseClock:
    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.began = time.monotonic()
        self.seconds: dict[str, float] = {}  # in the order parts first came
        self._stack: list[tuple[str, float]] = []  # (part, when it last resumed)
        self._sync = sync or (lambda: None)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        self._sync()  # what the part it interrupts queued is that part's
        now = time.monotonic()
        if self._stack:
            outer, since = self._stack[-1]
            self._add(outer, now - since)
        self.seconds.setdefault(name, 0.0)
        self._stack.append((name, now))
        try:
            yield
        finally:
            self._sync()
            done = time.monotonic()
            _name, since = self._stack.pop()
            self._add(name, done - since)
            if self._stack:
                outer, _ = self._stack[-1]
                self._stack[-1] = (outer, done)

    def _add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)

    def move(self, seconds: float, source: str, target: str) -> None:
        """Count `seconds` already counted in `source` in `target` instead (a step's compiling)."""
        if self._stack:  # the running part's time so far, counted now
            name, since = self._stack[-1]
            now = time.monotonic()
            self._add(name, now - since)
            self._stack[-1] = (name, now)
        moved = min(max(0.0, seconds), self.seconds.get(source, 0.0))
        self.seconds[source] = self.seconds.get(source, 0.0) - moved
        self._add(target, moved)

    def totals(self) -> list[PhaseTime]:
        """Every part's seconds so far (the running ones up to now), and "other" for the rest of the wall time."""
        now = time.monotonic()
        seconds = dict(self.seconds)
        for name, since in self._stack[-1:]:
            seconds[name] = seconds.get(name, 0.0) + (now - since)
        rest = (now - self.began) - sum(seconds.values())
        out = [PhaseTime(name, round(value, 3)) for name, value in seconds.items()]
        return [*out, PhaseTime(OTHER, round(max(0.0, rest), 3))]


def device_sync(device: Any) -> Callable[[], None] | None:
    """The wait for `device`'s queued work at a part's boundary: a GPU's synchronize; None on the CPU."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    return lambda: torch.cuda.synchronize(device)


def run_times(trainer: Any) -> tuple[list[PhaseTime], float | None]:
    """(the run's phases so far, images per second of step time) for its `run_finished` event."""
    phases = trainer.clock.totals()
    meter = getattr(trainer, "meter", None)  # none when the run failed before its steps
    steps = next((p.seconds for p in phases if p.name == "steps"), 0.0)
    images = meter.images_done if meter is not None else 0
    return phases, (round(images / steps, 3) if images and steps > 0 else None)
