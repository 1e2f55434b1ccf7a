"""A helper process for the Dataset page's heavy work, talking to the window over one pipe.

Checking and thumbnailing thousands of images is Python work; in a thread of the window's
process it would hold the interpreter lock and every paint would wait for it. In a helper
process it only costs CPU, at a lower priority. Messages are read on the GUI thread by a
timer, a few milliseconds at a time, so a burst of results never freezes the window.

This is not the studio's command wrapper (`gui/runner/process.py`): a command writes text to a
console file and may outlive the window; a helper runs a Python function, trades Python
objects with the window (pixels, problems in chunks) and ends with it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

POLL_MS = 15
SLICE_S = 0.006  # longest stretch spent reading messages per timer tick


class HelperProcess(QObject):
    """Runs `target(conn, *args)` in a fresh interpreter (spawn: no copy of Qt's threads or state)."""

    sig_message = Signal(object)
    sig_exited = Signal()  # the helper ended or died without `stop` being called

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], parent: QObject | None = None) -> None:
        super().__init__(parent)
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe(duplex=True)
        self._process = context.Process(target=target, args=(child, *args), daemon=True)
        self._process.start()
        child.close()
        self._running = True
        self._timer = QTimer(self, interval=POLL_MS)
        self._timer.timeout.connect(self._poll)
        self._timer.start()

    @property
    def running(self) -> bool:
        return self._running

    def send(self, message: Any) -> bool:
        """False when the helper is gone (sig_exited follows)."""
        if not self._running:
            return False
        try:
            self._conn.send(message)
        except (BrokenPipeError, OSError):
            QTimer.singleShot(0, self, self._ended)
            return False
        return True

    def _poll(self) -> None:
        deadline = time.perf_counter() + SLICE_S
        while self._running and time.perf_counter() < deadline:
            try:
                if not self._conn.poll():
                    break
                message = self._conn.recv()
            except (EOFError, OSError):
                self._ended()
                return
            self.sig_message.emit(message)
        if self._running and not self._process.is_alive() and not self._conn.poll():
            self._ended()

    def _ended(self) -> None:
        if not self._running:
            return
        self._close()
        self.sig_exited.emit()

    def _close(self) -> None:
        self._running = False
        self._timer.stop()
        with contextlib.suppress(OSError):
            self._conn.close()

    def stop(self, grace_s: float = 1.0) -> None:
        """Ask the helper to end; it is killed if still there after `grace_s` (it holds nothing to save).

        The window does not wait for it: a finished helper is reaped in the background.
        """
        if self._running:
            with contextlib.suppress(OSError):
                self._conn.send(None)
            self._close()
        _reap(self._process, time.monotonic() + grace_s)

    def join(self, timeout_s: float) -> None:
        """Wait until the helper has exited (tests and shutdown); kill it after `timeout_s`."""
        self._process.join(timeout_s)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout_s)


_exiting: list[tuple[Any, float]] = []  # (process, kill after) of helpers told to end
_reaper: QTimer | None = None


def _reap(process: Any, kill_after: float) -> None:
    global _reaper
    if process.exitcode is not None:
        return
    _exiting.append((process, kill_after))
    if _reaper is None:
        _reaper = QTimer(interval=100)
        _reaper.timeout.connect(_reap_some)
    _reaper.start()


def _reap_some() -> None:
    now = time.monotonic()
    for entry in list(_exiting):
        process, kill_after = entry
        if process.exitcode is None and now > kill_after:
            process.kill()
        if process.exitcode is not None:  # exitcode polls without blocking
            _exiting.remove(entry)
    if not _exiting and _reaper is not None:
        _reaper.stop()




def join_exiting(timeout_s: float) -> None:
    """Wait for the helpers told to end (at shutdown): none outlives the window."""
    for process, _kill_after in list(_exiting):
        process.join(timeout_s)
        if process.exitcode is None:
            process.kill()
            process.join(timeout_s)
    _exiting.clear()
