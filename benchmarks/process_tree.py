"""The GPU scripts' children end with the script: on exit, on SIGTERM/SIGINT and at a timeout.

Children stay in the script's process group (no new session), so an outer `timeout` or the
device machine's clean-up reaches them; the script itself ends every descendant when it
leaves, and on Linux a SIGKILL of the script ends its direct children too (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import atexit
import contextlib
import signal
from typing import Any


def die_with_parent() -> None:
    """`preexec_fn` for a child (Linux): it gets SIGKILL when the script dies, however it dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def kill_tree(pid: int) -> None:
    """End a process and all of its descendants."""
    import psutil

    try:
        parent = psutil.Process(pid)
        family = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for proc in family:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(family, timeout=10)


def end_children() -> None:
    """End every process this script started, and theirs."""
    import psutil

    try:
        family = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for proc in family:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(family, timeout=10)


def _on_signal(signum: int, _frame: Any) -> None:
    end_children()
    raise SystemExit(128 + signum)


def end_children_on_exit() -> None:
    """From now on, leaving the script (normally, SIGTERM or SIGINT) ends its children first."""
    atexit.register(end_children)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
