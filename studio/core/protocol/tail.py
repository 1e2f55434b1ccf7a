"""The one tail of a growing file: from an offset, a bounded read per call, whole lines out.

`FileTail` reads what a file gained since the last call (at most `read_cap` bytes, so a
backlog is read over several calls and a window never stalls), splits it with one
`LineBuffer` and starts again from the top when the file shrank or was replaced.
`ConsoleTail` adds what a console pane needs: text decoded once per character (a
character split across two reads is held back with its line), and a progress bar's
`\\r` redraws kept apart from the finished lines.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.protocol.lines import MAX_LINE, LineBuffer

log = logging.getLogger(__name__)

READ_CAP = 1 << 20  # one read takes at most 1 MB


class FileTail:
    """Incremental reader of one file's lines (bytes).

    `read()` returns `LineBuffer` pieces of what was appended since the last call. A file
    that shrank or was replaced (another inode) is read again from the start, and
    `restarted` is true after that call so the caller can reset what it built.
    """

    def __init__(self, path: str | Path, offset: int = 0, read_cap: int | None = READ_CAP,
                 max_line: int = MAX_LINE, breaks: bytes = b"\n") -> None:
        self.path = Path(path)
        self.offset = offset
        self.read_cap = read_cap
        self.lines = LineBuffer(max_line, breaks)
        self.restarts = 0
        self.restarted = False
        self.read_error: OSError | None = None  # why the last read could not read the file
        self._inode: int | None = None

    @property
    def pending_bytes(self) -> int:
        return self.lines.pending

    @property
    def skipped_lines(self) -> int:
        return self.lines.skipped_lines

    def read(self) -> list[bytes | int]:
        self.restarted = False
        try:
            stat = os.stat(self.path)
        except OSError:
            return []
        if self._inode is not None and (stat.st_ino != self._inode or stat.st_size < self.offset):
            log.info("%s was truncated or replaced; reading it again from the start", self.path)
            self.offset = 0
            self.lines = LineBuffer(self.lines.max_line, self.lines.breaks)
            self.restarts += 1
            self.restarted = True
        self._inode = stat.st_ino
        if stat.st_size <= self.offset:
            return []
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read(self.read_cap or -1)
        except OSError as exc:
            # A folder of another user, a directory in the file's place, a network drive gone:
            # said once, and `has_more` stays false until a read succeeds again.
            if self.read_error is None or str(exc) != str(self.read_error):
                log.warning("cannot read %s: %s", self.path, exc)
            self.read_error = exc
            return []
        self.read_error = None
        self.offset += len(data)
        return self.lines.feed(data)

    def has_more(self) -> bool:
        """True when the file holds bytes the last read did not take (the read cap reached).

        False after a read that failed: there is nothing more to get now.
        """
        if self.read_error is not None:
            return False
        try:
            return os.stat(self.path).st_size > self.offset
        except OSError:
            return False

    def read_all(self) -> list[bytes | int]:
        """Everything up to the end of the file now, the partial last line included (its writer is gone)."""
        pieces = self.read()
        while self.has_more() and not self.restarted:
            pieces.extend(self.read())
        pieces.extend(self.lines.flush())
        return pieces


@dataclass
class ConsoleText:
    """What one read of a console gave: finished lines, and the line a progress bar is redrawing."""

    lines: list[str] = field(default_factory=list)
    progress: str = ""


def _last_segment(text: str) -> str:
    return text.rstrip("\r").rsplit("\r", 1)[-1]


class ConsoleTail:
    """A console file (a command's merged stdout and stderr) read as it grows, as text."""

    def __init__(self, path: str | Path, offset: int = 0, read_cap: int = READ_CAP, max_line: int = MAX_LINE) -> None:
        self.file = FileTail(path, offset, read_cap, max_line, breaks=b"\r\n")
        self._rest = ""  # the line being written: its last progress segment only

    @property
    def path(self) -> Path:
        return self.file.path

    def pump(self) -> ConsoleText:
        """The lines finished since the last call, and the progress line as it stands."""
        return self._text(self.file.read())

    def finish(self) -> ConsoleText:
        """Everything left; a last line without a newline counts as finished (the command ended)."""
        out = self._text(self.file.read_all())
        if self._rest:
            out.lines.append(_last_segment(self._rest))
            self._rest = ""
        out.progress = ""
        return out

    def _text(self, pieces: list[bytes | int]) -> ConsoleText:
        out = ConsoleText()
        for piece in pieces:
            if isinstance(piece, int):
                out.lines.append(f"[studio] a console line of {piece / 1e6:.1f} MB was left out")
                continue
            # A piece ends at a line break (ASCII), so no character is ever cut in two here.
            parts = (self._rest + piece.decode("utf-8", "replace")).split("\n")
            rest = parts.pop()
            out.lines.extend(_last_segment(part) for part in parts)
            self._rest = rest[rest.rstrip("\r").rfind("\r") + 1:]  # earlier redraws of the bar are gone
        # The drawing under way (tqdm draws after its `\r`): shown as it stands, a cut character left for later.
        drawing = self.file.lines.preview(4096).decode("utf-8", "ignore")
        current = self._rest + drawing
        out.progress = _last_segment(current) if current else ""
        return out
