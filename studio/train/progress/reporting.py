"""Rank 0's voice: events to RUN_DIR/events.jsonl and a short line per event on stdout.

Other ranks hold a silent reporter, so the loop never asks which rank it is on; only the error
that ends such a rank is printed (to stderr, which the run's console.log collects). Every event
is written before its line is printed; a failed print never ends the training.

A failed event write does: a run whose record is gone cannot be followed, resumed or judged.
The writer's reserve is released (its room holds the rest of the cut line, the `error` and the
`run_finished`), the event that failed raises `EventsNotWritten` (a `disk_full` error when the
disk is full), and from then on only the run's end is written.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from studio.core.runs.events import (
    Checkpoint,
    EpochSaved,
    Error,
    Event,
    EventWriter,
    Phase,
    RunFinished,
    RunStarted,
    RunWarning,
    Sample,
    Step,
    Validation,
)
from studio.core.runs.folders import EVENTS_FILE
from studio.core.runs.records.outcome import skipped_text
from studio.core.runs.records.phase_times import phase_summary
from studio.train.errors import TrainError, write_failure


class EventsNotWritten(TrainError):
    """An event could not be written to events.jsonl: the run stops rather than train unrecorded."""


class Reporter:
    def __init__(self, run_dir: Path, active: bool, print_every: int = 10, rank: int = 0) -> None:
        self.active = active
        self.rank = rank
        self.run_dir = run_dir
        self.writer = EventWriter(run_dir / EVENTS_FILE) if active else None
        self.print_every = max(1, print_every)
        self.warnings = 0
        self.total = 0
        self.write_error: OSError | None = None
        self.lost: EventsNotWritten | None = None  # set by the first failed write; the loop stops on it
        self.last_error = ""  # the message of the last error printed
        self.mirrors: list[Any] = []  # loggers that get every event written (output.log_to; train/extras/logs.py)
        # Called after each phase event (the trainer's set-up: a Stop asked while it loads, caches or makes class
        # images is seen there, not only at the first step minutes later).
        self.after_phase: Callable[[str], None] | None = None

    def emit(self, event: Event) -> None:
        if self.writer is None:
            if isinstance(event, Error) and event.kind not in ("sample", "crash"):  # those print their traceback
                # A rank whose GPU ran out of memory ends the run; rank 0 is ended with it before it can
                # write a word, so the reason is said here or nowhere.
                _say(f"rank {self.rank}: {self._line(event)}", sys.stderr)
            return
        if isinstance(event, RunStarted):
            self.total = event.total_steps
        last = isinstance(event, RunFinished) or (isinstance(event, Error) and event.kind != "sample")
        if self.lost is not None and not last:
            raise self.lost  # only the run's end still goes into the reserve's room
        try:
            self.writer.write(event)
        except OSError as exc:
            self._write_failed(exc)
            if not last:
                assert self.lost is not None
                raise self.lost from None
            return  # the end of the run could not be written either; its lines are still printed below
        for mirror in self.mirrors:
            mirror.write(event)
        line = self._line(event)
        if line:
            _say(line, sys.stdout, flush=event.type != "step")

    def flush(self) -> None:
        """Put what was written so far on disk now (step events are otherwise flushed once a second)."""
        if self.writer is not None and self.lost is None:
            try:
                self.writer.flush()
            except OSError as exc:
                self._write_failed(exc)

    def _write_failed(self, exc: OSError) -> None:
        """Free the reserve and write what is pending into its room; the first failure is remembered."""
        assert self.writer is not None
        if self.write_error is None:
            self.write_error = exc
            path = self.writer.path
            error = write_failure(exc, path.parent, None, path.name)
            if error is not None:
                self.lost = EventsNotWritten(error.kind, error.message, error.hint, error.path)
            else:
                self.lost = EventsNotWritten("crash", f"cannot write {path}: {exc.strerror or exc}",
                                             "check the disk and the folder's permissions, then resume the run",
                                             str(path))
        if self.writer.release_reserve():
            with contextlib.suppress(OSError):
                self.writer.flush()

    def _line(self, event: Event) -> str:
        if isinstance(event, Step):
            if event.step % self.print_every and event.step not in (1, self.total):
                return ""
            eta = f", eta {event.eta_s:.0f}s" if event.eta_s is not None else ""
            flops = f", {event.tflops:.1f} TFLOP/s" if event.tflops is not None else ""
            mfu = f" ({event.mfu:.0%} MFU)" if event.mfu is not None else ""
            return (f"step {event.step}: loss {event.loss:.4f}, lr {event.lr:.2e}, "
                    f"{event.samples_per_s:.1f} img/s{flops}{mfu}{eta}")
        if isinstance(event, Phase):
            if event.total and event.done not in (0, event.total):
                return ""
            count = f" {event.done}/{event.total}" if event.total else ""
            return f"[{event.name}]{count} {event.message}".rstrip()
        if isinstance(event, RunWarning):
            return f"warning: {event.message}" + (f" ({event.hint})" if event.hint else "")
        if isinstance(event, Error):
            self.last_error = event.message
            where = f" [{event.path}]" if event.path else ""
            return f"error ({event.kind}): {event.message}{where}" + (f"\n  hint: {event.hint}" if event.hint else "")
        if isinstance(event, Sample):
            return f"samples at step {event.step}: " + ", ".join(event.images)
        if isinstance(event, Validation):
            return f"validation at step {event.step}: loss {event.loss:.4f} ({event.images} held-out images)"
        if isinstance(event, Checkpoint):
            return f"checkpoint at step {event.step}: {event.path}"
        if isinstance(event, EpochSaved):
            return f"LoRA of epoch {event.epoch} (step {event.step}): " + ", ".join(event.outputs)
        if isinstance(event, RunFinished):
            repeat = not event.message or event.message == self.last_error  # said by the error line just above
            times = phase_summary(event.phases, event.images_per_s)
            return (f"run {event.status} at step {event.step}" + ("" if repeat else f": {event.message}")
                    + skipped_text(event) + (f"\ntime: {times}" if times else ""))
        return ""

    def warn(self, message: str, path: str | None = None, hint: str = "") -> None:
        self.warnings += 1
        self.emit(RunWarning(message=message, path=path, hint=hint))

    def phase(self, name: str, done: int = 0, total: int = 0, message: str = "",
              elapsed_s: float | None = None) -> None:
        self.emit(Phase(name=name, done=done, total=total, message=message, elapsed_s=elapsed_s))
        if self.after_phase is not None:
            self.after_phase(name)

    def error(self, kind: str, message: str, hint: str = "", path: str | None = None) -> None:
        self.emit(Error(kind=kind, message=message, hint=hint, path=path))

    def failure(self, kind: str, exc: BaseException, message: str, hint: str) -> None:
        """A failure the run survives (a sample): the event says what and what to do, stderr has the traceback."""
        print("".join(traceback.format_exception(exc)), file=sys.stderr, flush=True)
        self.error(kind, message, hint)

    def crash(self, exc: BaseException) -> None:
        """An unexpected exception: the event carries its last frames, stderr the whole traceback.

        The event comes first: if stderr is a dead pipe, the record of the crash still stands.
        """
        tail = "".join(traceback.format_exception(exc, limit=-3)).strip()
        self.error("crash", f"{exc.__class__.__name__}: {exc}",
                   "this is a bug or an environment problem; console.log holds the full traceback:\n" + tail)
        _say("".join(traceback.format_exception(exc)), sys.stderr)

    def close(self) -> None:
        for mirror in self.mirrors:
            mirror.close()
        self.mirrors = []
        if self.writer is not None:
            try:
                self.writer.close()
            except OSError as exc:
                _say(f"warning: cannot finish writing {self.writer.path} ({exc})", sys.stderr)


def _say(text: str, stream: TextIO, flush: bool = True) -> None:
    """Print, losing the line rather than the run when the output is gone (a closed pipe, a full disk)."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=stream, flush=flush)
