"""A run's growing files on another machine, kept byte for byte in a local run folder.

The Train page follows a remote run exactly as a local one: it tails a local
events.jsonl. `RemoteFileMirror` makes that file: one long command (in practice
`ssh host tail -c +OFFSET -F FILE`) streams what the remote file gains, and only whole
lines are appended here. When the connection drops, the command starts again at the
next byte not yet received, so no line is lost or written twice; the local file's
size is where a mirror started after a restart of the studio resumes.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO

from studio.core.files import try_lock
from studio.core.protocol.lines import MAX_LINE, LineBuffer
from studio.core.protocol.streaming import ReconnectingStream
from studio.core.remote.ssh import RemoteError

log = logging.getLogger(__name__)

# (first byte to send, counted from 0; the file for the command's stderr) -> the started command
StreamFrom = Callable[[int, IO[bytes]], "subprocess.Popen[bytes]"]
# Called with the whole lines that arrived together, before they are appended (e.g. to fetch the
# images their sample events name: the file never names an image that is not here yet).
BeforeLines = Callable[[list[bytes]], None]


class RemoteFileMirror:
    """Appends to `local` what a remote file gains, whole lines only, across dropped connections.

    `received` counts the remote file's bytes seen so far (the local size plus a partial
    last line held back); each (re)start asks `stream_from(received)` for the rest. The
    stream ends when the command exits with anything but "connection lost" (for `tail
    --pid`: the run's process is gone and everything was sent).
    """

    def __init__(self, name: str, local: Path, stream_from: StreamFrom, before_lines: BeforeLines | None = None,
                 max_line: int = MAX_LINE, breaks: bytes = b"\n") -> None:
        self.local = local
        self.local.parent.mkdir(parents=True, exist_ok=True)
        self._stream_from = stream_from
        self._before_lines = before_lines
        # Searches only the bytes that arrive; a line over max_line is never held (see _write).
        self._lines = LineBuffer(max_line, breaks)
        # One mirror per file, across processes: two (the studio and `studio-train remote watch`) would each
        # append every line, and the loss plot would show each step twice. The OS lets go with the process.
        self._lock = open(local.parent / f".{local.name}.follow", "ab")  # noqa: SIM115 - closed by close()
        if not try_lock(self._lock.fileno()):
            self._lock.close()
            raise RemoteError(f"{local} is being kept up to date already (by the studio or by studio-train remote "
                              "watch): one follower at a time; watch it there, or stop that one first")
        self._handle = open(local, "ab")  # noqa: SIM115 - held for the mirror's life, closed by close()
        self.received = self._handle.tell()
        self.stream = ReconnectingStream(name, self._start, self._on_data, on_reconnect=self._resumed)

    @property
    def ended(self) -> bool:
        """The remote side finished (not: the connection dropped) and everything it wrote is here."""
        return self.stream.ended and not self.stream.running

    @property
    def reconnects(self) -> int:
        return self.stream.reconnects

    def start(self) -> None:
        self.stream.start()

    def wait(self, timeout_s: float) -> bool:
        done = self.stream.wait(timeout_s)
        if done:
            self._flush_partial()
        return done

    def close(self) -> None:
        self.stream.close()
        if self.stream.ended:
            self._flush_partial()
        self._handle.close()
        self._lock.close()

    # ------------------------------------------------------------ the stream's thread
    def _start(self, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        return self._stream_from(self.received, stderr)

    def _resumed(self) -> str:
        return f"reconnected; resuming at byte {self.received} of {self.local.name}"

    @property
    def skipped_lines(self) -> int:
        """Lines over the cap, kept here as zero bytes of the same length (see `_write`)."""
        return self._lines.skipped_lines

    def _on_data(self, chunk: bytes) -> None:
        self.received += len(chunk)
        self._write(self._lines.feed(chunk))

    def _write(self, pieces: list[bytes | int]) -> None:
        """Whole lines appended as they are; a skipped line as a hole of its length ending in a newline.

        The hole (sparse: no disk used) keeps the local size equal to the bytes received, which is
        where a mirror started after a restart of the studio resumes; readers skip it as garbage.
        """
        for piece in pieces:
            if isinstance(piece, int):
                log.warning("%s: a line of %d bytes is over the %d-byte limit; left out",
                            self.local, piece, self._lines.max_line)
                self._hole(piece - 1)
                self._handle.write(b"\n")
                continue
            if self._before_lines is not None:
                self._before_lines(piece.splitlines(keepends=True))
            self._handle.write(piece)
        if pieces:
            self._handle.flush()

    def _hole(self, size: int) -> None:
        self._handle.flush()
        self._handle.truncate(os.fstat(self._handle.fileno()).st_size + size)

    def _flush_partial(self) -> None:
        """A last line without a newline (its writer died mid-line) is kept too: the copies stay equal."""
        if not self._handle.closed:
            pieces = self._lines.flush()
            for piece in pieces:
                if isinstance(piece, int):
                    self._hole(piece)
                else:
                    self._handle.write(piece)
            self._handle.flush()
