"""Reading a run's events.jsonl while it grows: complete lines only, in bulk for step events.

`EventTail` reads what was appended since its last poll and keeps a partial last line
for later; runs of step events come back as `StepBatch` columns (a replay is mostly
steps, and building one object per step was most of its time).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.protocol.jsonlines import loads_line
from studio.core.protocol.tail import FileTail
from studio.core.runs.events import Event, UnknownEvent, event_from_dict

_loads: Callable[[bytes | str], Any]
try:  # several times faster on long replays; the standard library does the same job
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    from json import loads as _loads

log = logging.getLogger(__name__)


def decode_event(line: bytes | str) -> Event:
    """`events.parse_event` with orjson where it is installed (replays parse 100,000s of lines).

    Raises ValueError for garbage and UnknownEvent for types this version does not know.
    """
    return event_from_dict(loads_line(line))


def _column(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    """A required number of every row (KeyError if one lacks it, ValueError if not a number)."""
    return np.fromiter(map(itemgetter(key), rows), dtype=np.float64, count=len(rows))


def _floats(values: list[Any]) -> np.ndarray:
    """Numbers (None -> NaN) as float64; ValueError/TypeError for anything else."""
    array = np.array(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError("not a list of numbers")
    return array


@dataclass
class RankColumns:
    """The memory of one rank over the steps of a StepBatch (MB; NaN where not reported)."""

    device: str
    time: np.ndarray
    allocated: np.ndarray
    peak: np.ndarray
    reserved: np.ndarray


class StepBatch:
    """Consecutive step events as columns, built in bulk from their decoded JSON objects.

    A replay is mostly step events: turning each into a dataclass and appending its
    numbers one by one costs several times more than reading the file. Columns are
    numpy arrays made once per batch; `events()` gives the typed Step events on demand.
    """

    __slots__ = ("last", "loss", "lr", "memory", "mfu", "rows", "samples_per_s", "step", "tflops", "time")

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        """Raises KeyError, TypeError or ValueError when a row is not a valid step event."""
        now = time.time()
        self.rows = rows
        self.step = _column(rows, "step")
        self.time = _floats([r.get("time", now) for r in rows])
        self.loss = _floats([r["loss"] for r in rows])  # may be None (NaN): a diverged step
        self.lr = _floats([r["lr"] for r in rows])
        self.samples_per_s = _floats([r.get("samples_per_s", 0.0) for r in rows])
        # Optional (newer trainers, known models): NaN where a step does not carry them.
        self.tflops = _floats([r.get("tflops") for r in rows])
        self.mfu = _floats([r.get("mfu") for r in rows])
        _column(rows, "epoch")  # required by the protocol even though nothing plots it
        # Every rank's memory of every row, flattened: one comprehension per column runs at C speed.
        per_row = [r.get("memory") or () for r in rows]
        mems = [m for row_mems in per_row for m in row_mems]
        self.memory: dict[int, RankColumns] = {}
        if mems:
            times = np.repeat(self.time, [len(row_mems) for row_mems in per_row])
            ranks = np.fromiter(map(itemgetter("rank"), mems), dtype=np.int64, count=len(mems))
            devices = list(map(itemgetter("device"), mems))  # required, as in RankMemory
            allocated = _floats([m.get("allocated_mb") for m in mems])
            missing = np.isnan(allocated)
            if missing.any():  # on the CPU the trainer reports RSS; it plays the part of "allocated"
                allocated[missing] = _floats([m.get("rss_mb") for m in mems])[missing]
            peak = _floats([m.get("peak_mb") for m in mems])
            reserved = _floats([m.get("reserved_mb") for m in mems])
            for rank in np.unique(ranks).tolist():
                picked = np.flatnonzero(ranks == rank)
                self.memory[int(rank)] = RankColumns(
                    str(devices[picked[0]]), times[picked], allocated[picked], peak[picked], reserved[picked]
                )
        self.last = rows[-1]

    def __len__(self) -> int:
        return len(self.rows)

    def events(self) -> list[Event]:
        return [event_from_dict(r) for r in self.rows]


Item = Event | StepBatch


class EventTail:
    """Incremental reader of one events file (the protocol's `FileTail`, lines decoded as events).

    `poll()` returns the events of the complete lines appended since the last call. A file
    that shrank or was replaced (another inode) is read again from the start, and
    `restarted` is true after that poll so the caller can reset what it built. A line over
    1 MB is garbage, skipped and counted without being held.
    """

    def __init__(self, path: str | Path, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes  # bound the work of one poll so the GUI never stalls
        self.garbage_lines = 0
        self.unknown_types: set[str] = set()
        self._file = FileTail(self.path, read_cap=max_bytes)
        self._line_no = 0

    @property
    def offset(self) -> int:
        return self._file.offset

    @property
    def restarts(self) -> int:
        return self._file.restarts

    @property
    def restarted(self) -> bool:
        return self._file.restarted

    @property
    def read_error(self) -> OSError | None:
        """Why the last poll could not read the file."""
        return self._file.read_error

    @property
    def pending_bytes(self) -> int:
        """Bytes of a line that has no newline yet (a writer mid-line, or one that died)."""
        return self._file.pending_bytes

    def poll(self) -> list[Event]:
        """The typed events of the complete lines appended since the last poll."""
        return _expand(self.poll_items())

    def poll_items(self) -> list[Item]:
        """Like `poll`, with runs of step events kept together as StepBatch (fast to apply)."""
        pieces = self._file.read()
        if self._file.restarted:
            self._line_no = 0
        return self._items(pieces)

    def has_more(self) -> bool:
        """True when the file holds bytes the last poll did not read (max_bytes reached).

        False after a poll that could not read the file: there is nothing more to get now.
        """
        return self._file.has_more()

    def finish(self) -> list[Event]:
        """Read the rest, including a last line without newline if it parses (the writer is gone)."""
        return _expand(self.finish_items())

    def finish_items(self) -> list[Item]:
        items = self.poll_items()
        while self.has_more() and not self.restarted:
            items.extend(self.poll_items())
        tail = self._file.lines.flush()
        if tail and (isinstance(tail[0], int) or tail[0].strip()):
            items.extend(self._items([tail[0] + b"\n"] if isinstance(tail[0], bytes) else tail))
        return items

    def _items(self, pieces: list[bytes | int]) -> list[Item]:
        items: list[Item] = []
        for piece in pieces:
            if isinstance(piece, int):  # a line over the cap: garbage, never held
                self._line_no += 1
                self._garbage(f"<a line of {piece} bytes>".encode(), self._line_no)
                continue
            lines = piece.split(b"\n")
            lines.pop()  # the piece ends with its last line's newline
            items.extend(self._parse(lines))
        return items

    def _parse(self, lines: list[bytes]) -> list[Item]:
        with _gc_paused():
            return self._parse_lines(lines)

    def _parse_lines(self, lines: list[bytes]) -> list[Item]:
        base = self._line_no  # line i of `lines` is line base + i + 1 of the file
        self._line_no += len(lines)
        try:
            # One comprehension while every line is JSON (nearly always): no per-line Python work.
            decoded: list[Any] = [_loads(raw) if raw else None for raw in lines]
        except (ValueError, RecursionError):
            decoded = []
            for index, raw in enumerate(lines):
                text = raw.strip()
                try:
                    decoded.append(loads_line(text) if text else None)
                except ValueError:
                    decoded.append(None)
                    self._garbage(text, base + index + 1)
        items: list[Item] = []
        steps: list[dict[str, Any]] = []
        step_lines: list[int] = []
        for index, data in enumerate(decoded):
            # Step events are most of a file: keep their objects and build columns in bulk.
            if type(data) is dict and data.get("type") == "step":
                steps.append(data)
                step_lines.append(index)
                continue
            if data is None:
                continue
            if steps:
                items.extend(self._step_items(steps, [base + i + 1 for i in step_lines]))
                steps, step_lines = [], []
            try:
                items.append(event_from_dict(data))
            except UnknownEvent as exc:
                self._unknown(str(exc), base + index + 1)
            except ValueError:
                self._garbage(lines[index].strip(), base + index + 1)
        if steps:
            items.extend(self._step_items(steps, [base + i + 1 for i in step_lines]))
        return items

    def _step_items(self, rows: list[dict[str, Any]], line_numbers: list[int]) -> list[Item]:
        try:
            return [StepBatch(rows)]
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
        # Some row is broken: build the batch again without the rows that fail on their own.
        good: list[dict[str, Any]] = []
        for row, line_no in zip(rows, line_numbers, strict=True):
            try:
                StepBatch([row])
                event_from_dict(row)
            except (KeyError, TypeError, ValueError, AttributeError):
                self._garbage(str(row).encode(), line_no)
                continue
            good.append(row)
        return [StepBatch(good)] if good else []

    def _unknown(self, kind: str, line_no: int) -> None:
        if kind not in self.unknown_types:
            self.unknown_types.add(kind)
            log.warning(
                "%s line %d: unknown event type %r (written by a newer trainer?); events of this type are skipped",
                self.path, line_no, kind,
            )

    def _garbage(self, text: bytes, line_no: int) -> None:
        self.garbage_lines += 1
        if self.garbage_lines <= 3:
            shown = text.decode("utf-8", errors="replace")
            log.warning("%s line %d is not an event; skipped: %.80s", self.path, line_no, shown)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Decoded events hold no reference cycles, yet creating 100,000s of dicts triggers the
    cycle collector again and again over all of them (40% of a replay); pause it meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _expand(items: list[Item]) -> list[Event]:
    events: list[Event] = []
    for item in items:
        if isinstance(item, StepBatch):
            events.extend(item.events())
        else:
            events.append(item)
    return events
