"""`python -m studio.core.trainenv.guard STUDIO_PID -- COMMAND…`: one install step, ended with the studio.

The step (uv or pip, and whatever they start) runs in a process group of its own under this
small guard. When the studio goes away without cancelling, killed or crashed, the guard sees
that it has a new parent and ends the whole group, so no `uv pip install` is left running.
A cancel ends the guard with SIGTERM, which it passes on to the group the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import FrameType

POLL_S = 0.2
GRACE_S = 5.0


def _end_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=GRACE_S)
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)  # what the step started may outlive it


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m studio.core.trainenv.guard STUDIO_PID -- COMMAND…", file=sys.stderr)
        return 2
    studio, command = int(argv[0]), argv[2:]
    child: subprocess.Popen[bytes] | None = None
    stopped = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopped
        if child is None:  # still starting it: ended as soon as it exists
            stopped = True
            return
        _end_group(child)
        sys.exit(143)

    # Before the step starts: a cancel that lands while it starts must not leave it running in its own session.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    if stopped:
        return 143
    try:
        child = subprocess.Popen(command, start_new_session=True)
    except OSError as exc:
        print(f"{command[0]} could not start: {exc}", file=sys.stderr, flush=True)
        return 127
    if stopped:
        _end_group(child)
        return 143
    while child.poll() is None:
        if os.getppid() != studio:
            _end_group(child)
            return 143
        time.sleep(POLL_S)
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)  # helpers the step left behind
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
