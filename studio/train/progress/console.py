"""The trainer owns its console log: every rank writes RUN_DIR/console.log itself.

`studio-train run` and the studio start the launcher with its output going into console.log
(a file, never a pipe) and follow that file. When the trainer was started some other way, with
its output on a terminal or a pipe, it writes console.log itself and copies its lines to that
terminal or pipe for as long as something reads them: a closed terminal, `| head` or a crashed
CLI then costs the lines on the screen, never the run. A hang-up (SIGHUP) is ignored for the
same reason. A write that fails on a full disk is skipped, never raised into the training.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
from pathlib import Path
from typing import IO

from studio.core.runs.folders import CONSOLE_FILE

# A reader that went away: nothing more can be shown there, ever.
_GONE = (errno.EPIPE, errno.EIO, errno.EBADF, errno.ENXIO, errno.ECONNRESET)


class ConsoleStream(io.TextIOBase):
    """A text stream that writes to the run's console log and to the stream the trainer was started with.

    A target whose reader is gone (EPIPE, EIO) is dropped, and its file descriptor pointed at
    /dev/null so that nothing else in the process trips over it; any other failed write (a full
    disk) loses that text only.
    """

    def __init__(self, log: IO[str] | None, original: IO[str] | None) -> None:
        super().__init__()
        self._targets: list[IO[str]] = [t for t in (log, original) if t is not None]
        self._log = log

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return "replace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        if not self._targets:
            raise OSError(errno.EBADF, "the console has no open target")
        return self._targets[0].fileno()

    def write(self, text: str) -> int:
        for target in list(self._targets):
            try:
                try:
                    target.write(text)
                except UnicodeEncodeError:  # a character its code page lacks (Windows): escaped, the target kept
                    encoding = getattr(target, "encoding", None) or "ascii"
                    target.write(text.encode(encoding, "backslashreplace").decode(encoding))
                if target is not self._log:
                    target.flush()
            except (OSError, ValueError) as exc:
                self._failed(target, exc)
        return len(text)

    def flush(self) -> None:
        for target in list(self._targets):
            try:
                target.flush()
            except (OSError, ValueError) as exc:
                self._failed(target, exc)

    def _failed(self, target: IO[str], exc: BaseException) -> None:
        gone = isinstance(exc, ValueError) or getattr(exc, "errno", None) in _GONE
        if not gone or target is self._log:
            return  # a full disk: this text is lost, later lines may fit again
        self._targets.remove(target)
        with contextlib.suppress(OSError, ValueError):
            silence_descriptor(target.fileno())


def silence_descriptor(fd: int) -> None:
    """Point `fd` at /dev/null: buffered text and C libraries' output then go nowhere instead of failing."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def is_console(fd: int, path: Path) -> bool:
    try:
        mine, theirs = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def in_utf8(stream: IO[str] | None) -> None:
    """Write `stream` (the rank's output into console.log) in UTF-8, as the studio reads that file and writes its
    own lines into it. Python writes an output redirected to a file in the system's code page on Windows (cp1252,
    cp932): a folder named Jürgen came out garbled in the console pane, and a character the code page lacks (the
    "→" of a hint, a folder named in Chinese) lost every later line of the rank."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        stream.reconfigure(encoding="utf-8", errors="backslashreplace")  # type: ignore[union-attr]


def own_console(run_dir: Path) -> None:
    """Make this rank's output safe: into RUN_DIR/console.log, immune to a dead terminal or pipe."""
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    path = run_dir / CONSOLE_FILE
    log: IO[str] | None = None
    already = is_console(1, path)  # started by the studio or studio-train: the output is the log
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        if is_console(fd, path):
            in_utf8(stream)
    if not already:
        try:
            log = open(path, "a", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115
        except OSError as exc:
            print(f"warning: cannot write {path} ({exc}); the output goes to the terminal only", file=sys.stderr)
    sys.stdout = ConsoleStream(log, sys.stdout)
    sys.stderr = ConsoleStream(log, sys.stderr)
