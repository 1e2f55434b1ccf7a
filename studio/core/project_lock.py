"""The project's lock: one writer at a time for the files two studio windows share.

Two windows (or a window and `studio-train`) can have one project open. Whoever changes the
queue (`queue.json`) or the config (`studio.toml`) takes this lock, reads the file again,
changes it and writes it before letting go, so no save drops what the other one wrote just
before. It is an OS lock held for milliseconds, on the project folder itself (POSIX: nothing
is added to a folder that may be the person's image folder), or on `<project>/.studio.lock`
where folders cannot be locked (Windows). The kernel drops it when its process ends, however
it ends, so a crashed window never leaves the project locked.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from studio.core.files import WINDOWS_LOCKS, try_lock, unlock

PROJECT_LOCK_FILE = ".studio.lock"
WAIT_S = 15.0  # a writer holds it for milliseconds; this long means something hangs

_held = threading.local()  # the lock files this thread holds, with their depth: a nested take does not wait


class ProjectBusyError(OSError):
    """The project's lock stayed taken; the message says where and what to do."""


@contextmanager
def project_lock(root: str | Path, wait_s: float = WAIT_S) -> Iterator[None]:
    """Hold the project's lock while the block reads and writes the project's shared files."""
    folder = Path(os.path.realpath(root))
    path = folder / PROJECT_LOCK_FILE if WINDOWS_LOCKS else folder
    depth: dict[Path, int] = _held.__dict__.setdefault("depth", {})
    if depth.get(path):
        depth[path] += 1
        try:
            yield
        finally:
            depth[path] -= 1
        return
    deadline = time.monotonic() + wait_s
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644) if WINDOWS_LOCKS else os.open(path, os.O_RDONLY)
        if try_lock(fd, exclusive=True):
            break
        os.close(fd)
        if time.monotonic() > deadline:
            raise ProjectBusyError(f"another studio window (or studio-train) has held the lock of the project "
                                   f"{folder} for {wait_s:.0f} s, so nothing was changed; try again, or close the "
                                   "other window if it hangs")
        time.sleep(0.005)
    depth[path] = 1
    try:
        yield
    finally:
        depth.pop(path, None)
        unlock(fd)
        os.close(fd)
