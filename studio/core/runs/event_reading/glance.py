"""What one row of the Runs table needs of a run's events, read from the two ends of a long file.

A file up to `WHOLE_READ_BYTES` is replayed whole (exact). A longer one (a week of steps: a
gigabyte) is read at its head (the first run_started, when the run began) and at its tail
(the last steps, validation, error and how it ended): a few MB whatever its size, so the
table of a project with long runs fills in a moment. What lies only in the skipped middle is
not counted: a pause between two legs there still counts as training time, and the LoRAs of
epochs saved there are left out of the Output column (they stay in the run's output folder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.runs.event_reading.files import head_events, last_kept_validation, tail_events
from studio.core.runs.events import Error, RunFinished, RunStarted
from studio.core.runs.folders import EVENTS_FILE
from studio.core.runs.records.run_model import RunModel, replay_run

WHOLE_READ_BYTES = 8 << 20  # read whole up to this size (a few seconds of parsing at most)
TAIL_BYTES = 1 << 20  # the last steps of a run, thousands of them


@dataclass
class Glance:
    """A run's events as the Runs table shows them."""

    started: RunStarted | None = None  # the newest run_started read (config, total steps)
    first_time: float | None = None
    duration_s: float = 0.0
    step: int = 0
    total_steps: int = 0
    last_loss: float | None = None
    validation_loss: float | None = None
    outputs: list[str] = field(default_factory=list)  # as the events name them
    finished: RunFinished | None = None  # the last leg's run_finished
    last_error: Error | None = None
    events: int = 0  # events read (0: none written yet)
    read_error: OSError | None = None  # the events file exists but cannot be read
    whole: bool = True  # every event was read (False: the middle of a long file was skipped)


# What each events file said when it was last read, by its identity, size and time of change: the Runs
# table is filled again at every run's start, and a project of 200 finished runs read them all every time
# (seconds of a frozen window). A file that grew or was replaced is read again.
_SEEN: dict[Path, tuple[tuple[int, int, int], Glance]] = {}
_SEEN_MAX = 2048


def glance_run(run_dir: str | Path) -> Glance:
    """The Runs table's view of a run folder's events (see the module's note on long files)."""
    folder = Path(run_dir)
    path = folder / EVENTS_FILE
    try:
        info = os.stat(path)
    except OSError:  # missing (not started) or unreadable: the replay says which
        return _whole(folder)
    stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
    known = _SEEN.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    if info.st_size <= WHOLE_READ_BYTES:
        seen = _whole(folder)
    else:
        try:
            seen = _ends(path, info.st_size)
        except OSError as exc:
            return Glance(read_error=exc, whole=False)
    if seen.read_error is None:
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.pop(next(iter(_SEEN)))
        _SEEN[path] = (stamp, seen)
    return seen


def _whole(folder: Path) -> Glance:
    rep = replay_run(folder)
    model = rep.model
    return Glance(
        started=model.started, first_time=model.first_time, duration_s=model.elapsed_s(), step=model.step,
        total_steps=model.total_steps, last_loss=model.last_loss, validation_loss=model.validation_loss.last(),
        outputs=[*model.outputs, *model.epoch_outputs], finished=model.finished,
        last_error=model.errors[-1] if model.errors else None, events=model.event_count,
        read_error=rep.read_error,
    )


def _ends(path: Path, size: int) -> Glance:
    head, tail = RunModel(), RunModel()
    for event in head_events(path):
        head.apply(event)
    for event in tail_events(path, min(TAIL_BYTES, size)):
        tail.apply(event)
    if tail.first_time is None:  # no event in one window (garbage there): the other says what is known
        tail = head
    if head.first_time is None:
        head = tail
    both = head is not tail
    validation = tail.validation_loss.last()
    if validation is None:  # validated less often than the tail holds steps: look further back
        found = last_kept_validation(path)  # never one of training a resumed leg made again
        validation = found.loss if found is not None else head.validation_loss.last()
    errors = tail.errors or head.errors
    duration = tail.elapsed_s()
    if both:  # the tail's own clock, plus the time from the first event to the tail's (pauses there unknown)
        duration += (tail.first_time or 0.0) - (head.first_time or 0.0) - head.paused_s
    return Glance(
        started=tail.started or head.started,
        first_time=head.first_time,
        duration_s=max(0.0, duration),
        step=tail.step or head.step,
        total_steps=tail.total_steps or head.total_steps,
        last_loss=tail.last_loss if len(tail.steps) else head.last_loss,
        validation_loss=validation,
        outputs=[*tail.outputs, *(head.epoch_outputs if both else []), *tail.epoch_outputs],
        finished=tail.finished,
        last_error=errors[-1] if errors else None,
        events=head.event_count + (tail.event_count if both else 0),
        whole=False,
    )


__all__ = ["Glance", "glance_run"]
