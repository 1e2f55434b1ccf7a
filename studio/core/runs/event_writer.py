"""Appending events to a run's events.jsonl so that the run's end is written even on a full disk.

The writer keeps a small reserve file beside the events (`events.jsonl.reserve`, made when
the file is opened). When a write fails because the disk is full, the trainer calls
`release_reserve`: the reserve's room is free again, the bytes that did not fit (the rest of
a cut line) are written first, and there is room for the `error` and `run_finished` lines.
A file whose last line was cut (a full disk, a kill) gets a new line before the next event,
so that event is never glued to the cut one.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import ClassVar, Protocol

# The end of a run (an error with its hint, a run_finished: a few KB) and the second of step events
# still pending when the write failed (a few hundred bytes each, several hundred a second at most).
RESERVE_BYTES = 256 * 1024
RESERVE_SUFFIX = ".reserve"


class _Event(Protocol):
    type: ClassVar[str]

    def to_json(self) -> str: ...


class EventWriter:
    """Appends events to a run's events.jsonl; flushes at most once a second, or at once for
    events that matter (everything except steps), so a crash loses at most a second of steps.

    Bytes a failed write left over stay pending and go first at the next flush (after
    `release_reserve`), so a line cut by a full disk is completed, never lost in the middle.
    """

    def __init__(self, path: str | Path, flush_interval: float = 1.0, reserve_bytes: int = RESERVE_BYTES) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0),
                                       0o666)
        self._pending = bytearray(b"\n" if _ends_cut(self._fd) else b"")
        self._interval = flush_interval
        self._last_flush = 0.0
        self.reserve = self.path.with_name(self.path.name + RESERVE_SUFFIX)
        _make_reserve(self.reserve, reserve_bytes)

    def write(self, event: _Event) -> None:
        if self._fd is None:
            return
        self._pending += (event.to_json() + "\n").encode("utf-8")
        now = time.monotonic()
        if event.type != "step" or now - self._last_flush >= self._interval:
            self._last_flush = now
            self.flush()

    def flush(self) -> None:
        """Write what is pending; on an error (a full disk) the bytes not written stay pending."""
        while self._fd is not None and self._pending:
            written = os.write(self._fd, self._pending)
            del self._pending[:written]

    def release_reserve(self) -> bool:
        """Free the reserve's room for the run's last lines; False when there was none."""
        try:
            self.reserve.unlink()
        except OSError:
            return False
        return True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            while self._pending:
                del self._pending[:os.write(fd, self._pending)]
        finally:
            os.close(fd)  # closes the file even when that write fails (a full disk)
            self.release_reserve()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ends_cut(fd: int) -> bool:
    """Whether the file's last line has no newline (cut by a full disk or a kill)."""
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return False
        if hasattr(os, "pread"):
            return os.pread(fd, 1, size - 1) != b"\n"
        os.lseek(fd, size - 1, os.SEEK_SET)  # Windows has no pread; an append still goes to the end
        return os.read(fd, 1) != b"\n"
    except OSError:
        return False


def _make_reserve(path: Path, size: int) -> None:
    """The reserve file with its blocks allocated; none when the disk has no room left for it already."""
    if size <= 0:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
    except OSError:
        return
    try:
        if os.fstat(fd).st_size >= size:
            return  # left by a run killed before it could remove it: still good
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:  # pragma: no cover - Windows
            os.write(fd, bytes(size))
    except OSError:
        os.close(fd)
        fd = -1
        with contextlib.suppress(OSError):
            path.unlink()
    finally:
        if fd >= 0:
            os.close(fd)
