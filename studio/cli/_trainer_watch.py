"""The trainer a launcher started, followed even when the launcher dies first.

`studio-train run` waits for the training, not for the launcher: a launcher killed by the
person, the OOM killer or a crash may leave its trainer running on. Polling the launcher's
children cannot see a trainer that was started and orphaned between two polls, so on Linux
this process becomes a child subreaper while it follows a run: an orphaned rank is then
re-parented to it instead of to init, and found among its own children. Elsewhere (and for
ranks in a session of their own) the run's trainer lock says whether rank 0 still lives.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from studio.core.runs.scheduling.lock import lock_holder

_PR_SET_CHILD_SUBREAPER = 36


def _set_subreaper(on: bool) -> bool:
    """Linux only: orphaned descendants come to this process (True when the kernel agreed)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class TrainerWatch:
    """The launcher's descendants (the ranks), remembered while they live, and orphans taken in."""

    def __init__(self, launcher_pid: int, run_dir: Path, earlier_children: set[int]) -> None:
        self.launcher_pid = launcher_pid
        self.run_dir = run_dir
        self.known: dict[int, psutil.Process] = {}
        # Children this process had before the launcher (a test's servers): never taken for ranks.
        self._earlier = earlier_children
        self._me = psutil.Process()
        # A lock holder older than the launcher is another trainer (the one that refused this launch):
        # never followed as if it were ours.
        try:
            self._launched_at = psutil.Process(launcher_pid).create_time()
        except psutil.Error:
            self._launched_at = time.time()

    def remember(self) -> None:
        found: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            found += psutil.Process(self.launcher_pid).children(recursive=True)
        with contextlib.suppress(psutil.Error):
            for child in self._me.children():
                if child.pid in (self.launcher_pid, *self._earlier):
                    continue
                found.append(child)  # an orphaned rank, re-parented to us as the subreaper
                with contextlib.suppress(psutil.Error):
                    found += child.children(recursive=True)
        for proc in found:
            self.known.setdefault(proc.pid, proc)
        holder = lock_holder(self.run_dir)
        if (holder is not None and holder.host == socket.gethostname() and holder.pid > 0
                and holder.pid != self._me.pid and holder.pid not in self.known):
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(holder.pid)
                # create_time has a clock tick's resolution: a rank started with its launcher may read
                # a tick earlier.
                if proc.create_time() >= self._launched_at - 0.05:
                    self.known[holder.pid] = proc

    def alive(self) -> list[psutil.Process]:
        self.remember()
        living = []
        for proc in self.known.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    living.append(proc)
            except psutil.Error:
                continue
        self.reap()
        return living

    def reap(self) -> None:
        """Collect the exit status of ranks that were re-parented to us, so none is left a zombie."""
        if os.name != "posix":
            return
        for pid, proc in self.known.items():
            with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
                if proc.ppid() == self._me.pid and proc.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(pid, os.WNOHANG)


@contextlib.contextmanager
def adopting_orphans() -> Iterator[set[int]]:
    """While following a run: orphaned ranks come to this process. Yields the children it had before."""
    before = {child.pid for child in psutil.Process().children()}
    turned_on = _set_subreaper(True)
    try:
        yield before
    finally:
        if turned_on:
            _set_subreaper(False)
