"""Ending a process tree with nothing it starts meanwhile left behind (Kill, and closing with "stop").

A Kill looks up the processes under a root and signals them. A process the tree starts between
the look-up and the signal is not in the list: the run launcher starting the trainer at that
moment, a trainer starting a rank, a data worker or a compile worker. On POSIX two things close
that gap:
- the root is held (SIGSTOP) while its tree is looked up and signalled, so it starts nothing
  after the look-up; a fork it was making when the hold came finishes first and is found;
- a process group led by a process of the tree (the trainer runs in a session of its own) is
  signalled as a group, which reaches every member, those born after the look-up too.
On Windows the processes found are what is ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psutil

HOLD_WAIT_S = 0.5  # how long the look-up waits for the held root to stop (microseconds, unless it is in I/O)
_HELD = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)

# The run launcher (`python -c SESSION_LAUNCHER trainer-command...`): runs the trainer in a new session
# (a process group of its own, which a Kill signals as a whole) and passes its exit code on.
SESSION_LAUNCHER = """\
import os, subprocess, sys
kw = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt" else {"start_new_session": True}
child = subprocess.Popen(sys.argv[1:], **kw)
while True:
    try:
        code = child.wait()
        break
    except KeyboardInterrupt:
        pass
sys.exit(128 - code if code < 0 else code)
"""


@dataclass
class ProcessTree:
    """The processes of one command, children first, and the process groups they lead."""

    procs: list[psutil.Process] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)

    def terminate(self) -> None:
        """Ask every process to end (SIGTERM: it may save and clean up)."""
        self._signal(kill=False)

    def kill(self) -> None:
        """End what is left now (SIGKILL), the groups' members born since the look-up too."""
        self._signal(kill=True)

    def wait(self, timeout_s: float) -> list[psutil.Process]:
        """Wait up to `timeout_s` for the processes found to end; those still alive."""
        _gone, alive = psutil.wait_procs(self.procs, timeout=timeout_s)
        return list(alive)

    def kill_after(self, timeout_s: float) -> list[psutil.Process]:
        """Wait up to `timeout_s` for the processes to end, then kill what is left (blocking); those
        that even SIGKILL did not end within `timeout_s` (a process stuck in the kernel)."""
        if not self.wait(timeout_s):
            return []
        self.kill()
        return self.wait(timeout_s)

    def _signal(self, kill: bool) -> None:
        if os.name == "posix":
            for group in self.groups:
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL if kill else signal.SIGTERM)
        for proc in self.procs:
            with contextlib.suppress(psutil.Error):
                if kill:
                    if proc.is_running():
                        proc.kill()
                else:
                    proc.terminate()


def end_tree(root: psutil.Process | None, known: Sequence[psutil.Process] = (), kill: bool = False) -> ProcessTree:
    """Find `root`'s tree (with `known`, processes found earlier, whose parent may be gone) and signal it:
    SIGTERM, or SIGKILL with `kill`. The root is held while this happens. Returns the tree, for the
    SIGKILL after a grace (`ProcessTree.kill`) or a wait."""
    held = root is not None and _hold(root)
    try:
        tree = find_tree(root, known)
        if kill:
            tree.kill()
        else:
            tree.terminate()
    finally:
        if held and root is not None:
            with contextlib.suppress(psutil.Error):
                root.resume()  # a SIGTERM it holds is delivered now
    return tree


def _hold(root: psutil.Process) -> bool:
    """Stop `root` (POSIX) and wait until it has: after that it forks nothing more."""
    if os.name != "posix":
        return False
    try:
        root.suspend()
    except psutil.Error:
        return False
    deadline = time.monotonic() + HOLD_WAIT_S
    while time.monotonic() < deadline:
        try:
            if root.status() in _HELD:
                break
        except psutil.Error:
            break
        time.sleep(0.001)
    return True


def find_tree(root: psutil.Process | None, known: Sequence[psutil.Process] = ()) -> ProcessTree:
    """`root`'s tree as it is now, with `known` (processes found earlier, whose parent may be gone)."""
    found: list[psutil.Process] = []
    if root is not None:
        with contextlib.suppress(psutil.Error):
            found = [*reversed(root.children(recursive=True)), root]
    pids = {p.pid for p in found}
    procs = [*(p for p in known if p.pid not in pids), *found]  # children first: known ones were found earlier
    return ProcessTree(procs, _led_groups(procs))


def _led_groups(procs: Sequence[psutil.Process]) -> list[int]:
    """The process groups that a process of `procs` leads (never the studio's own group)."""
    if os.name != "posix":
        return []
    own = os.getpgrp()
    groups = []
    for proc in procs:
        with contextlib.suppress(OSError, psutil.Error):
            if proc.is_running() and os.getpgid(proc.pid) == proc.pid != own:
                groups.append(proc.pid)
    return groups
