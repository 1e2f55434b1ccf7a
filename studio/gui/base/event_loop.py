"""Waiting for something without freezing the window or holding the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QEventLoop, QTimer


def wait_for(
    condition: Callable[[], bool], timeout_s: float, interval_ms: int = 10, user_input: bool = True
) -> bool:
    """Run a local event loop until `condition` holds or the time is up; True if it holds.

    The loop idles inside Qt between checks, so worker threads get the interpreter lock and a
    trainer on the same machine gets the CPU while we wait.
    """
    if condition():
        return True
    loop = QEventLoop()
    deadline = time.monotonic() + timeout_s

    def check() -> None:
        if condition() or time.monotonic() > deadline:
            loop.quit()

    timer = QTimer(interval=interval_ms)
    timer.timeout.connect(check)
    timer.start()
    flags = QEventLoop.ProcessEventsFlag.AllEvents
    if not user_input:
        flags = QEventLoop.ProcessEventsFlag.ExcludeUserInputEvents
    loop.exec(flags)
    timer.stop()
    return bool(condition())
