"""The GPU scripts' children end with the script: on exit, on SIGTERM/SIGINT and at a timeout.

Children stay in the script's process group (no new session), so an outer `timeout` or the
device machine's clean-up reaches them; the script ends every descendant when it leaves
(`ending_children`), and on Linux a SIGKILL of the script ends its direct children too
(PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def die_with_parent() -> None:
    """`preexec_fn` for a child (Linux): it gets SIGKILL when the script dies, however it dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def kill_tree(pid: int) -> None:
    """End a process and all of its descendants, those it starts while they are looked up too (the
    studio's own Kill: the root is held meanwhile, and the process groups of the tree are signalled whole)."""
    import psutil

    from studio.core.runs.ending import end_tree

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    end_tree(root, kill=True).wait(10)


# The direct children the process had before the script's block began: not the script's to end (a caller
# that runs the script's main() in its own process, as the tests do, keeps its helpers).
_kept: frozenset[int] = frozenset()


def _direct_children() -> frozenset[int]:
    import psutil

    try:
        return frozenset(p.pid for p in psutil.Process().children())
    except psutil.Error:
        return frozenset()


def end_children() -> None:
    """End every process this script started, and theirs (not the children the process had before)."""
    import psutil

    family = []
    try:
        for child in psutil.Process().children():
            if child.pid not in _kept:
                family += [child, *child.children(recursive=True)]
    except psutil.Error:
        return
    for proc in family:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(family, timeout=10)


def _on_signal(signum: int, _frame: Any) -> None:
    end_children()
    raise SystemExit(128 + signum)


@contextmanager
def ending_children() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGINT end the script's children and then the script; leaving the
    block, however, ends them too, and puts the signal handlers back as they were."""
    global _kept
    kept_before, _kept = _kept, _direct_children()
    previous = {signum: signal.signal(signum, _on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        end_children()
        _kept = kept_before
        for signum, handler in previous.items():
            signal.signal(signum, handler)
