"""A command whose output is read as it comes, started again when its connection drops.

Following a file or a GPU on another machine is one long `ssh ... tail -F` (or
`nvidia-smi -l 1`): no poll per second, no new login per sample. A rented machine's
connection drops now and then; `ReconnectingStream` runs the command on a thread of
its own, hands every chunk of output to a callback, and when the command exits with a
"connection lost" status (ssh: 255) starts it again after a growing pause. The callback
decides where the next start resumes (a byte offset), so nothing is lost or read twice.
"""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO

log = logging.getLogger(__name__)

SSH_LOST = 255  # ssh's own exit status: the connection failed or dropped
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
# A command that ran this long (or sent data) was a good connection: the next pause starts short again.
HEALTHY_S = 5.0
_CHUNK = 64 * 1024

# Called with the file that takes the command's stderr; returns the started command (stdout piped).
StartCommand = Callable[[IO[bytes]], "subprocess.Popen[bytes]"]


class ReconnectingStream:
    """Runs `start(stderr_file)` (a Popen with stdout piped), feeds its output to `on_data` on a thread.

    Exit statuses in `retry_codes` mean the connection dropped: the command is started
    again (by calling `start` once more) after a pause from BACKOFF_S. Any other exit
    ends the stream: `ended` is set and `exit_code` holds the status. `close()` ends it
    from outside. Notices for the person (lost, reconnected) collect in `notices`.
    """

    def __init__(self, name: str, start: StartCommand, on_data: Callable[[bytes], None],
                 retry_codes: tuple[int, ...] = (SSH_LOST,), on_reconnect: Callable[[], str] | None = None) -> None:
        self.name = name
        self._start = start
        self._on_data = on_data
        self._on_reconnect = on_reconnect
        self.retry_codes = retry_codes
        self.reconnects = 0
        self.ended = False
        self.exit_code: int | None = None
        self.error = ""  # the last words of the command's stderr, or why it could not start
        self.notices: deque[str] = deque()
        self._closing = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"stream {name}", daemon=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """End the command and the thread; safe to call more than once and from any thread."""
        self._closing.set()
        with self._lock:
            process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        if process is not None and process.poll() is None:  # it ignored SIGTERM
            process.kill()
            process.wait(timeout_s)

    def wait(self, timeout_s: float) -> bool:
        """Wait for the stream to end on its own; True when it did."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # ------------------------------------------------------------ the thread
    def _run(self) -> None:
        pause = 0
        while not self._closing.is_set():
            began = time.monotonic()
            code, got_data = self._run_once()
            if code is None or self._closing.is_set():
                break
            if code not in self.retry_codes:
                self.exit_code, self.ended = code, True
                break
            pause = 0 if got_data or time.monotonic() - began > HEALTHY_S else min(pause + 1, len(BACKOFF_S) - 1)
            self.reconnects += 1
            wait = BACKOFF_S[pause]
            self.notices.append(f"{self.name}: connection lost ({self.error or 'no reason given'}); "
                                f"reconnecting in {wait:g} s")
            if self._closing.wait(wait):
                break
            if self._on_reconnect is not None:
                self.notices.append(f"{self.name}: {self._on_reconnect()}")

    def _run_once(self) -> tuple[int | None, bool]:
        """Run the command once; (exit status, whether it sent anything). None: it could not start."""
        with tempfile.TemporaryFile() as stderr:
            try:
                process = self._start_process(stderr)
            except OSError as exc:
                if not self._closing.is_set():
                    self.error = f"cannot start: {exc}"
                    self.exit_code, self.ended = -1, True
                return None, False
            with process:  # closes the pipe and waits for the command
                got_data, failed = self._read(process)
                code = process.wait()
            if failed:
                return None, got_data
            self.error = _last_line(stderr) or self.error
            return code, got_data

    def _read(self, process: subprocess.Popen[bytes]) -> tuple[bool, bool]:
        """Hand the output on until it ends; (got any data, the local side failed)."""
        stdout = process.stdout
        assert isinstance(stdout, io.BufferedReader)
        got_data = False
        try:
            while chunk := stdout.read1(_CHUNK):
                got_data = True
                self._on_data(chunk)
        except OSError as exc:  # the local side failed (disk full): nothing to retry
            self.error = f"cannot keep what arrives: {exc}"
            self.exit_code, self.ended = -1, True
            process.kill()
            return got_data, True
        return got_data, False

    def _start_process(self, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._closing.is_set():
                raise OSError("closed")
            process = self._start(stderr)
            self._process = process
        return process


def _last_line(handle: IO[bytes]) -> str:
    with contextlib.suppress(OSError):
        handle.seek(0)
        lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
        return lines[-1] if lines else ""
    return ""
