"""Folding a run's events into what the Train and Runs pages show.

`RunModel` turns events (and `StepBatch` columns) into the state of a run; `replay_run`
reads a whole run folder through `EventTail`. The same two serve a live local run and a
finished run copied back from elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from studio.core.runs.events import (
    Checkpoint,
    EpochSaved,
    Error,
    Event,
    Phase,
    RunFinished,
    RunStarted,
    RunWarning,
    Sample,
    Step,
    Validation,
)
from studio.core.runs.folders import EVENTS_FILE
from studio.core.runs.records.event_paths import path_in_run
from studio.core.runs.records.smoothing import SmoothedLoss
from studio.core.runs.tail import EventTail, Item, RankColumns, StepBatch, decode_event, event_from_dict

__all__ = [
    "ENDED", "STATUSES", "EventTail", "Item", "RankColumns", "RankSeries", "Replay", "RunModel", "SampleImage",
    "Series", "StepBatch", "decode_event", "event_from_dict", "replay", "replay_run",
]

# Statuses a run shows in its header.
STATUSES = ("preparing", "caching", "compiling", "training", "sampling", "saving", "finished", "failed", "stopped")
ENDED = ("finished", "failed", "stopped")
_PHASE_STATUS = {
    "loading": "preparing",
    "caching": "caching",
    "class_images": "caching",
    "compiling": "compiling",
    "training": "training",
    "sampling": "sampling",
    "saving": "saving",
}
_FINISH_STATUS = {"completed": "finished", "stopped": "stopped", "failed": "failed"}


class Series:
    """A growing float64 array: amortised O(1) appends, `view()` without copying."""

    def __init__(self, capacity: int = 1024) -> None:
        self._data = np.empty(capacity, dtype=np.float64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, value: float) -> None:
        if self._size == len(self._data):
            grown = np.empty(len(self._data) * 2, dtype=np.float64)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size] = value
        self._size += 1

    def extend(self, values: np.ndarray) -> None:
        end = self._size + len(values)
        if end > len(self._data):
            grown = np.empty(max(end, 2 * len(self._data)), dtype=np.float64)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : end] = values
        self._size = end

    def view(self) -> np.ndarray:
        return self._data[: self._size]

    def truncate(self, size: int) -> None:
        self._size = max(0, min(size, self._size))

    def last(self) -> float | None:
        return float(self._data[self._size - 1]) if self._size else None


@dataclass
class RankSeries:
    """Memory of one rank over time (x: UNIX time of the step event)."""

    device: str = ""
    time: Series = field(default_factory=Series)
    allocated: Series = field(default_factory=Series)
    peak: Series = field(default_factory=Series)
    reserved: Series = field(default_factory=Series)


@dataclass(frozen=True)
class SampleImage:
    step: int
    prompt: str
    prompt_index: int
    path: Path


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


class RunModel:
    """The state of a run built from its events; no Qt, cheap to feed 100,000 events."""

    def __init__(self, run_dir: str | Path | None = None) -> None:
        self.run_dir = Path(run_dir) if run_dir else None
        self.reset()

    def reset(self) -> None:
        self.status = "preparing"
        self.phase = ""
        self.phase_done = 0
        self.phase_total = 0
        self.message = ""
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None
        self.step = 0
        self.total_steps = 0
        self.epoch = 0
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.paused_s = 0.0  # between a stopped leg's last event and its resume: not training time
        # When the leg before ended (its run_finished, or the end of its process): the next event
        # begins a resumed leg, and the time between is no training time. None while a leg goes on.
        self._leg_ended_at: float | None = None
        self._pause_counted = False  # the resumed leg's pause was counted at its first event
        # The time of the newest event that is no warning: a resumed leg may warn before it loads (a pickled
        # model file, samples without prompts), and a leg killed without a word ended before those warnings.
        self._last_said: float | None = None
        # A leg's first step is timed with the warm-up (compiling, allocator, first batches): its
        # images/s and ETA say nothing of the run's speed, so they are left unknown.
        self._warm_up_step = True
        self.eta_s: float | None = None
        self.last_loss: float | None = None
        self.steps = Series()
        self.step_times = Series()
        self.loss = Series()
        self.lr = Series()
        self.samples_per_s = Series()  # images/s over the trainer's window of recent steps
        self.tflops = Series()  # model TFLOP/s per GPU (NaN where unknown)
        self.mfu = Series()  # fraction of the GPU's peak (NaN where unknown)
        # The loss line smoothed once where the whole run was read (a replay's worker): None while live.
        self.smoothed_loss: SmoothedLoss | None = None
        self.validation_steps = Series(64)  # the held-out images' loss at fixed noise (validation events)
        self.validation_loss = Series(64)
        self.compile_s: float | None = None  # seconds the compiling phases took, in all
        self.memory: dict[int, RankSeries] = {}
        self.samples: list[SampleImage] = []
        self._sample_places: dict[tuple[int, int], int] = {}  # (step, prompt index) -> its place in `samples`
        self.sample_controls: list[Path] = []  # edit runs: the control images the samples edit (the "before")
        self.checkpoints: list[Checkpoint] = []
        self.epoch_outputs: list[str] = []  # LoRAs written at the end of epochs, oldest first
        self.errors: list[Error] = []
        self.warnings: list[RunWarning] = []
        self.outputs: list[str] = []
        self.event_count = 0
        self.version = 0  # bumps on every change: views redraw only when it moved
        self.rewinds = 0  # bumps when a resumed leg drops the steps after its checkpoint: views start over

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def elapsed_s(self, now: float | None = None) -> float:
        """Seconds of training since the first event (the time a run was stopped before a resume left
        out); up to `now` while running, to the last event after."""
        if self.first_time is None:
            return 0.0
        end = self.last_time or self.first_time
        if self._leg_ended_at is not None:
            end = self._leg_ended_at  # stopped, or a resume still starting: the clock stands
        elif now is not None and not self.ended:
            end = max(end, now)
        return max(0.0, end - self.first_time - self.paused_s)

    def resolve(self, path: str) -> Path:
        """The file an event names, in this run folder and never outside it (`event_paths.py`)."""
        if self.run_dir is None:
            return Path(path)
        return path_in_run(self.run_dir, path, self.started.run_dir if self.started is not None else "")

    def apply_all(self, items: Iterable[Item]) -> None:
        """Apply events and StepBatches in order (what EventTail's poll_items returns)."""
        for item in items:
            if isinstance(item, StepBatch):
                self.apply_steps(item)
            else:
                self.apply(item)

    def apply_steps(self, batch: StepBatch) -> None:
        """Many step events at once: the same result as applying each, a fraction of the work."""
        n = len(batch)
        if not n:
            return
        self.event_count += n
        self.version += 1
        if self.first_time is None:
            self.first_time = float(batch.time[0])
        self._leg_goes_on(float(batch.time[0]))
        self.last_time = self._last_said = float(batch.time[-1])
        if self.status not in ENDED:
            self.status = "training"
        last = batch.last
        self.step, self.epoch = int(last["step"]), int(last["epoch"])
        self.last_loss = last["loss"]
        self.eta_s = last.get("eta_s")
        speeds = batch.samples_per_s
        if self._warm_up_step:
            self._warm_up_step = False
            speeds = speeds.copy()
            speeds[0] = float("nan")
            if n == 1:
                self.eta_s = None
        self.steps.extend(batch.step)
        self.step_times.extend(batch.time)
        self.loss.extend(batch.loss)
        self.lr.extend(batch.lr)
        self.samples_per_s.extend(speeds)
        self.tflops.extend(batch.tflops)
        self.mfu.extend(batch.mfu)
        for rank, cols in batch.memory.items():
            series = self.memory.get(rank)
            if series is None:
                series = self.memory[rank] = RankSeries(device=cols.device)
            series.time.extend(cols.time)
            series.allocated.extend(cols.allocated)
            series.peak.extend(cols.peak)
            series.reserved.extend(cols.reserved)

    def apply(self, event: Event) -> None:
        self.event_count += 1
        self.version += 1
        if self.first_time is None:
            self.first_time = event.time
        if not isinstance(event, RunFinished):
            if (isinstance(event, Phase) and event.name == "loading" and (self.started is not None or len(self.steps))
                    and self._leg_ended_at is None and not self._pause_counted and self._last_said is not None):
                # A trainer loads its model only before its run_started: this is a resumed leg, and the leg
                # before was killed without a word at its last event (the warnings since are this leg's).
                # The time between is no training time. (Steps without a run_started: the end of a long file,
                # read without its head.)
                self._leg_ended_at = self._last_said
            self._leg_goes_on(event.time)
        previous, self.last_time = self._last_said, event.time
        if not isinstance(event, RunWarning):
            self._last_said = event.time
        if isinstance(event, Step):
            self._apply_step(event)
        elif isinstance(event, RunStarted):
            if self.started is not None and previous is not None and not self._pause_counted:
                self._resumed_after(event.time - previous)  # the leg before ended without a word (killed)
            self._pause_counted = False
            self._warm_up_step = True
            self.started = event
            self.total_steps = event.total_steps
            self._rewind_to(event.resumed_from_step)
            self.step = max(self.step, event.resumed_from_step)
            # A run_started after a run_finished is a resumed run's next leg: it is live again.
            self.finished, self.status, self.message = None, "preparing", ""
        elif isinstance(event, Phase):
            self.phase, self.phase_done, self.phase_total = event.name, event.done, event.total
            self.message = event.message
            if event.name == "compiling" and event.elapsed_s is not None:
                self.compile_s = (self.compile_s or 0.0) + event.elapsed_s
            if not self.ended:
                self.status = _PHASE_STATUS.get(event.name, self.status)
        elif isinstance(event, Sample):
            for index, (image, prompt) in enumerate(zip(event.images, event.prompts, strict=False)):
                sample = SampleImage(event.step, prompt, index, self.resolve(image))
                # A leg resumed from a checkpoint before its last samples makes them again, into the same files:
                # the same image, listed once (in its place, so a view that reads the list's new end misses none).
                again = self._sample_places.get((event.step, index))
                if again is not None:
                    self.samples[again] = sample
                else:
                    self._sample_places[(event.step, index)] = len(self.samples)
                    self.samples.append(sample)
            if event.controls:
                self.sample_controls = [self.resolve(control) for control in event.controls]
        elif isinstance(event, Validation):
            self.validation_steps.append(event.step)
            self.validation_loss.append(_nan(event.loss))
        elif isinstance(event, Checkpoint):
            self.checkpoints.append(event)
        elif isinstance(event, EpochSaved):
            # A leg resumed from a checkpoint before an epoch's end saves that epoch again, into the same files.
            self.epoch_outputs.extend(output for output in event.outputs if output not in self.epoch_outputs)
        elif isinstance(event, Error):
            self.errors.append(event)
        elif isinstance(event, RunWarning):
            self.warnings.append(event)
        elif isinstance(event, RunFinished):
            self.finished = event
            self._leg_ended_at = event.time
            self.status = _FINISH_STATUS.get(event.status, "failed")
            self.outputs = list(event.outputs)
            self.message = event.message
            self.eta_s = 0.0 if self.status == "finished" else None
            if event.step:
                self.step = event.step

    def _apply_step(self, event: Step) -> None:
        if self.status not in ENDED:
            self.status = "training"
        self.step, self.epoch = event.step, event.epoch
        self.last_loss = event.loss
        warm_up, self._warm_up_step = self._warm_up_step, False
        self.eta_s = None if warm_up else event.eta_s
        self.steps.append(event.step)
        self.step_times.append(event.time)
        self.loss.append(_nan(event.loss))
        self.lr.append(_nan(event.lr))
        self.samples_per_s.append(float("nan") if warm_up else _nan(event.samples_per_s))
        self.tflops.append(_nan(event.tflops))
        self.mfu.append(_nan(event.mfu))
        for mem in event.memory:
            series = self.memory.get(mem.rank)
            if series is None:
                series = self.memory[mem.rank] = RankSeries(device=mem.device)
            series.time.append(event.time)
            # On the CPU the trainer reports RSS; it plays the part of "allocated".
            allocated = mem.allocated_mb if mem.allocated_mb is not None else mem.rss_mb
            series.allocated.append(_nan(allocated))
            series.peak.append(_nan(mem.peak_mb))
            series.reserved.append(_nan(mem.reserved_mb))

    def _rewind_to(self, step: int) -> None:
        """A resumed leg trains again from its checkpoint's step: the steps the leg before made after it
        (a kill, a crash, a damaged newest checkpoint) were lost and come again. They are dropped, so the
        loss and learning-rate lines do not turn back on themselves and the gallery shows each step once."""
        later = np.flatnonzero(self.steps.view() > step)
        validation_later = np.flatnonzero(self.validation_steps.view() > step)
        samples = [sample for sample in self.samples if sample.step <= step]
        if not len(later) and not len(validation_later) and len(samples) == len(self.samples):
            return
        if len(later):
            for series in (self.steps, self.step_times, self.loss, self.lr, self.samples_per_s, self.tflops, self.mfu):
                series.truncate(int(later[0]))
            last = self.loss.last()
            self.last_loss = None if last is None or last != last else last
        if len(validation_later):
            self.validation_steps.truncate(int(validation_later[0]))
            self.validation_loss.truncate(int(validation_later[0]))
        self.samples = samples
        self._sample_places = {(sample.step, sample.prompt_index): place for place, sample in enumerate(samples)}
        self.step = min(self.step, step)
        self.rewinds += 1

    def _leg_goes_on(self, time_s: float) -> None:
        """An event at `time_s`: after a leg that ended, the first of a resumed leg (the time between is
        a pause, whatever the new leg writes before its run_started)."""
        if self._leg_ended_at is None:
            return
        pause, self._leg_ended_at = time_s - self._leg_ended_at, None
        self._resumed_after(pause)
        self._pause_counted = True

    def _resumed_after(self, pause_s: float) -> None:
        """A resumed run's next leg: the pause is not training time, and the memory plot has a gap
        there (a missing point, not a line across it). The errors are the leg before's: a crash that was
        resumed from is no longer this run's error (the Train page's banner shows this leg's own)."""
        self.paused_s += max(0.0, pause_s)
        self.errors = []
        for series in self.memory.values():
            series.time.append(float(self.last_time or 0.0))
            for values in (series.allocated, series.peak, series.reserved):
                values.append(float("nan"))

    def mark_ended(self, status: str, message: str) -> None:
        """The process ended without a run_finished event (crash, kill): say so."""
        if self.ended:
            return
        self.status = status
        self.message = message
        self.eta_s = None
        self.last_time = time.time() if self.last_time is None else self.last_time
        self._leg_ended_at = self.last_time
        self.version += 1

    def speed(self) -> tuple[float | None, float | None, float | None]:
        """(images/s, TFLOP/s per GPU, MFU) of the newest step; None where not known."""
        def known(series: Series) -> float | None:
            value = series.last()
            return None if value is None or value != value else value

        return known(self.samples_per_s), known(self.tflops), known(self.mfu)

    def chosen_gpus(self) -> set[int] | None:
        """The GPUs the run was told to train on (launch.gpu_ids, numbered as nvidia-smi numbers them);
        None where it may use any of the machine's (the default, or before its run_started)."""
        launch = self.started.config.get("launch") if self.started is not None else None
        ids = launch.get("gpu_ids", "all") if isinstance(launch, dict) else "all"
        if not isinstance(ids, str) or ids == "all":
            return None
        try:
            return {int(part) for part in ids.split(",")}
        except ValueError:
            return None

    def memory_points(self) -> int:
        return sum(len(s.time) for s in self.memory.values())


@dataclass
class Replay:
    model: RunModel
    events: int
    garbage_lines: int
    unknown_types: set[str]
    read_error: OSError | None = None  # the events file exists but cannot be read


REPLAY_CHUNK_BYTES = 1 << 20


def replay_run(run_dir: str | Path) -> Replay:
    """Read a whole run folder's events into a new RunModel (with the reader's counts)."""
    folder = Path(run_dir)
    model = RunModel(folder)
    # Read and applied in pieces: each bulk step (a C call that holds the interpreter lock) stays
    # short and each piece's decoded lines are freed before the next, so a replay on a worker
    # thread never holds up the window for long (nor makes the cycle collector walk 100,000s of them).
    tail = EventTail(folder / EVENTS_FILE, max_bytes=REPLAY_CHUNK_BYTES)
    model.apply_all(tail.poll_items())
    while tail.has_more() and not tail.restarted:
        model.apply_all(tail.poll_items())
    model.apply_all(tail.finish_items())
    model.smoothed_loss = SmoothedLoss.of(model.loss.view())  # here, not on the GUI thread that shows it
    return Replay(model, model.event_count, tail.garbage_lines, set(tail.unknown_types), tail.read_error)


def replay(run_dir: str | Path) -> RunModel:
    """The RunModel of a run folder, from its events.jsonl (missing file: an empty model)."""
    return replay_run(run_dir).model
