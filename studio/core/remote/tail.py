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
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO

from studio.core.streaming import ReconnectingStream

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

    def __init__(self, name: str, local: Path, stream_from: StreamFrom, before_lines: BeforeLines | None = None) -> None:
        self.local = local
        self.local.parent.mkdir(parents=True, exist_ok=True)
        self._stream_from = stream_from
        self._before_lines = before_lines
        self._partial = b""
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

    # ------------------------------------------------------------ the stream's thread
    def _start(self, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        return self._stream_from(self.received, stderr)

    def _resumed(self) -> str:
        return f"reconnected; resuming at byte {self.received} of {self.local.name}"

    def _on_data(self, chunk: bytes) -> None:
        self.received += len(chunk)
        data = self._partial + chunk
        end = data.rfind(b"\n") + 1
        self._partial = data[end:]
        if not end:
            return
        whole = data[:end]
        if self._before_lines is not None:
            self._before_lines(whole.splitlines(keepends=True))
        self._handle.write(whole)
        self._handle.flush()

    def _flush_partial(self) -> None:
        """A last line without a newline (its writer died mid-line) is kept too: the copies stay equal."""
        if self._partial and not self._handle.closed:
            self._handle.write(self._partial)
            self._handle.flush()
            self._partial = b""
