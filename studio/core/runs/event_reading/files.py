"""Reading a finished events file without holding it: its two ends, or all of it streamed.

A run of a week writes a gigabyte of step events. The Runs table, `studio-train resume` and
the studio's last console line need only its first event (run_started), its last steps and
how it ended: they read a bounded window at each end (a few MB, whatever the file's size).
A TensorBoard export needs every event: `stream_events` reads them in bounded pieces, with
progress, never the whole file at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from studio.core.protocol.tail import FileTail
from studio.core.runs.events import Event, RunStarted, UnknownEvent, Validation
from studio.core.runs.tail import decode_event

HEAD_BYTES = 256 << 10  # the first event (run_started with its config) fits many times over
TAIL_WINDOW_BYTES = 256 << 10  # the first window read back from the end; each next one doubles
TAIL_LIMIT_BYTES = 8 << 20  # how far back from the end the newest events of a kind are looked for
STREAM_CHUNK_BYTES = 1 << 20  # one piece of a streamed file

Progress = Callable[[int, int], None]  # (bytes read, file size)


def _decode(raw: bytes) -> Event | None:
    """One line's event, None for a blank line, garbage or a type this version does not know."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        return decode_event(raw)
    except (ValueError, UnknownEvent):
        return None


def _wanted(kinds: tuple[str, ...]) -> Callable[[bytes], bool]:
    """A cheap test on the raw line (a search in C) before it is decoded: only lines that name a kind."""
    if not kinds:
        return lambda _raw: True
    names = [f'"{kind}"'.encode() for kind in kinds]
    return lambda raw: any(name in raw for name in names)


def head_events(path: str | Path, max_bytes: int = HEAD_BYTES) -> list[Event]:
    """The events of the first `max_bytes` of the file, complete lines only (all of a smaller file)."""
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # the window cut a line: it is left for a full read
        data = data[: data.rfind(b"\n", 0, max_bytes) + 1]
    return [event for event in map(_decode, data.split(b"\n")) if event is not None]


def events_backwards(path: str | Path, kinds: tuple[str, ...] = (), limit: int = TAIL_LIMIT_BYTES,
                     window: int = TAIL_WINDOW_BYTES) -> Iterator[Event]:
    """The file's events newest first, read from its end in growing windows, at most `limit` bytes.

    With `kinds`, only events of those types (the other lines are never decoded). A last line
    without a newline counts when it parses (its writer is gone); a line cut by the limit does not.
    """
    wanted = _wanted(kinds)
    with open(path, "rb") as handle:
        end = os.fstat(handle.fileno()).st_size
        carry = b""  # the start of a line whose beginning lies in the next window back
        budget = limit
        while end > 0 and budget > 0:
            start = max(0, end - min(window, budget))
            handle.seek(start)
            data = handle.read(end - start) + carry
            budget -= end - start
            end, window = start, window * 2
            lines = data.split(b"\n")
            carry = lines.pop(0) if start > 0 else b""
            for raw in reversed(lines):
                if wanted(raw):
                    event = _decode(raw)
                    if event is not None and (not kinds or event.type in kinds):
                        yield event


def last_kept_validation(path: str | Path, limit: int = TAIL_LIMIT_BYTES) -> Validation | None:
    """The run's last validation within `limit` bytes of the end (None where there is none).

    A leg resumed from a checkpoint trains again the steps the leg before made after it: a validation the
    killed leg measured after that checkpoint belongs to training that was lost, never to this run (a run
    stopped at step 450 does not report a loss "at step 500")."""
    kept = None  # the steps still the run's: up to the checkpoint of the earliest leg resumed since
    for event in events_backwards(path, (Validation.type, RunStarted.type), limit):
        if isinstance(event, RunStarted):
            kept = event.resumed_from_step if kept is None else min(kept, event.resumed_from_step)
        elif isinstance(event, Validation) and (kept is None or event.step <= kept):
            return event
    return None


def tail_events(path: str | Path, max_bytes: int) -> list[Event]:
    """The events of the last `max_bytes` of the file, oldest first (complete lines only)."""
    events = list(events_backwards(path, limit=max_bytes, window=max_bytes))
    events.reverse()
    return events


def stream_events(path: str | Path, progress: Progress | None = None,
                  chunk_bytes: int = STREAM_CHUNK_BYTES) -> Iterator[Event]:
    """Every event of the file in order, read a piece at a time (memory bounded by a piece, whatever
    the file's size, and each line decoded once); `progress(bytes read, size)` after each piece.
    Garbage, unknown types and lines over 1 MB are skipped; OSError when the file cannot be read."""
    size = os.stat(path).st_size
    reader = FileTail(path, read_cap=chunk_bytes)
    while True:
        pieces = reader.read()
        if reader.read_error is not None:
            raise reader.read_error
        yield from _events_of(pieces)
        if progress is not None:
            progress(min(reader.offset, size), size)
        if not reader.has_more() or reader.restarted:
            break
    yield from _events_of(reader.lines.flush())  # a last line without newline: its writer is gone


def _events_of(pieces: list[bytes | int]) -> Iterator[Event]:
    for piece in pieces:
        if isinstance(piece, bytes):  # an int stands for a line over the cap, never held
            for raw in piece.split(b"\n"):
                event = _decode(raw)
                if event is not None:
                    yield event
