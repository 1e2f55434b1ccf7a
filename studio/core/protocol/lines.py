"""Bytes in, whole lines out: the one line splitter of every reader of a growing file or a pipe.

Work is linear in the input: each chunk is searched once, only its own bytes, and the
partial last line it leaves is bounded. A line longer than `max_line` (a broken or
hostile writer: one 200 MB line with no newline) is skipped and counted, never held.
"""

from __future__ import annotations

MAX_LINE = 1 << 20  # 1 MB: far more than any line the studio's programs write


class LineBuffer:
    """Splits a stream into whole lines.

    `feed(chunk)` returns pieces in order: `bytes` (a run of whole lines, each ending in a
    break) or `int` (a skipped line's length in bytes, its break included). `breaks` are
    the bytes that end a line: b"\\n", or b"\\r\\n" for console text, where a progress bar's
    `\\r` ends a segment (its redraws are then never held as one long line).
    """

    def __init__(self, max_line: int = MAX_LINE, breaks: bytes = b"\n") -> None:
        self.max_line = max_line
        self.breaks = breaks
        self.skipped_lines = 0
        self._partial = bytearray()
        self._skipping = 0  # bytes of an over-long line dropped so far (0: not dropping)

    @property
    def pending(self) -> int:
        """Bytes of a line whose break has not arrived (a writer mid-line, or one that died)."""
        return len(self._partial) + self._skipping

    def preview(self, size: int) -> bytes:
        """The last `size` bytes of the partial line (empty while an over-long line is being skipped)."""
        return bytes(self._partial[-size:])

    def _last_break(self, data: bytes) -> int:
        return max(data.rfind(bytes([b])) for b in self.breaks)

    def _first_break(self, data: bytes, end: int) -> int:
        found = [i for i in (data.find(bytes([b]), 0, end + 1) for b in self.breaks) if i >= 0]
        return min(found)

    def feed(self, data: bytes) -> list[bytes | int]:
        end = self._last_break(data)
        if end < 0:
            self._hold(data)
            return []
        first = self._first_break(data, end) + 1
        pieces: list[bytes | int] = []
        head = len(self._partial) + self._skipping + first  # the line that was waiting, now whole
        if self._skipping or head > self.max_line:
            pieces.append(self._skipped(head))
            self._partial.clear()
            self._skipping = 0
        elif self._partial:
            pieces.append(bytes(self._partial) + data[:first])
            self._partial.clear()
        else:
            pieces.append(data[:first])
        middle = data[first:end + 1]
        if len(middle) > self.max_line:  # it may hold an over-long line: look at each (still linear)
            pieces.extend(self._sorted(middle))
        elif middle:
            pieces.append(middle)
        self._hold(data[end + 1:])
        return _merged(pieces)

    def flush(self) -> list[bytes | int]:
        """The partial last line as it is (its writer is gone), or its length if it was skipped."""
        if self._skipping or len(self._partial) > self.max_line:
            size = self.pending
            self._partial.clear()
            self._skipping = 0
            return [self._skipped(size)]
        tail = bytes(self._partial)
        self._partial.clear()
        return [tail] if tail else []

    def _sorted(self, data: bytes) -> list[bytes | int]:
        """Whole lines with any over-long one replaced by its length; `data` ends with a break.

        Steps of up to `max_line` bytes: a window that holds no break is inside an over-long line.
        A few searches in C per megabyte, never a Python step per line (a 30 MB replay is one chunk).
        """
        pieces: list[bytes | int] = []
        start = pos = 0  # start: the first byte not yet handed on; pos: the start of a line
        size = len(data)
        while pos < size:
            last = self._rfind(data, pos, min(size, pos + self.max_line))
            if last >= 0:  # every line that ends in this window is short enough
                pos = last + 1
                continue
            end = self._find(data, pos, size)  # the over-long line's own break (data ends with one)
            if pos > start:
                pieces.append(data[start:pos])
            pieces.append(self._skipped(end + 1 - pos))
            start = pos = end + 1
        if start < size:
            pieces.append(data[start:])
        return pieces

    def _rfind(self, data: bytes, start: int, end: int) -> int:
        return max(data.rfind(bytes([b]), start, end) for b in self.breaks)

    def _find(self, data: bytes, start: int, end: int) -> int:
        found = [i for i in (data.find(bytes([b]), start, end) for b in self.breaks) if i >= 0]
        return min(found) if found else end - 1

    def _skipped(self, size: int) -> int:
        self.skipped_lines += 1
        return size

    def _hold(self, data: bytes) -> None:
        if not data:
            return
        if self._skipping:
            self._skipping += len(data)
        elif len(self._partial) + len(data) > self.max_line:
            self._skipping = len(self._partial) + len(data)
            self._partial.clear()
        else:
            self._partial += data


def _merged(pieces: list[bytes | int]) -> list[bytes | int]:
    """Neighbouring runs of lines joined (fewer, larger writes)."""
    out: list[bytes | int] = []
    run: list[bytes] = []
    for piece in pieces:
        if isinstance(piece, bytes):
            run.append(piece)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(piece)
    if run:
        out.append(b"".join(run))
    return out


def whole_lines(pieces: list[bytes | int]) -> bytes:
    """The lines of `feed`'s pieces, skipped ones left out."""
    return b"".join(piece for piece in pieces if isinstance(piece, bytes))
