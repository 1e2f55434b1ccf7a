"""Who is training a run folder: the trainer's exclusive lock, and the studio's process file.

A trainer takes `RUN_DIR/trainer.lock` before it writes anything into the folder and holds it
until it exits. The file says who holds it (pid, host, since when); an OS lock on the open file
(flock on POSIX, a locked byte on Windows) says whether that process still lives: the kernel
drops it when the process dies, even by kill -9, so a lock file that nobody holds is stale and
the next trainer takes it over. Resume, delete and the Runs page ask `lock_holder` first.

The process file is the studio's own note of the process it started (the launcher, until the
trainer has taken the lock), checked by pid and start time.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from studio.core.files import WINDOWS_LOCKS, atomic_write_text, try_lock, unlock
from studio.core.runs.folders import LOCK_FILE, PROCESS_FILE

log = logging.getLogger(__name__)

# Windows locks a byte range; one byte far past the JSON keeps the text readable by others.
_WINDOWS_LOCK_OFFSET = 1 << 20


@dataclass(frozen=True)
class LockHolder:
    """The process that holds (or last held) a run's lock."""

    pid: int
    host: str
    started: float  # UNIX time the lock was taken

    def describe(self) -> str:
        since = _dt.datetime.fromtimestamp(self.started).strftime("%Y-%m-%d %H:%M") if self.started else "?"
        return f"process {self.pid} on {self.host} (since {since})"


class RunLockedError(RuntimeError):
    """Another trainer holds the run folder; the message names it and what to do."""

    def __init__(self, run_dir: Path, holder: LockHolder) -> None:
        self.run_dir, self.holder = run_dir, holder
        here = holder.host == socket.gethostname()
        advice = ("stop that run first (or wait for it to end)" if here else
                  f"stop it there first; if no trainer runs on {holder.host} any more, delete {run_dir / LOCK_FILE}")
        super().__init__(f"{run_dir.name} is being trained by {holder.describe()}; {advice}")


def _read_holder(path: Path) -> LockHolder | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LockHolder(int(data["pid"]), str(data["host"]), float(data.get("started", 0.0)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the lock file %s cannot be read (%s); its holder is unknown", path, exc)
        return LockHolder(0, "an unknown machine", 0.0)


def _live_holder(path: Path, wait_s: float = 1.0) -> LockHolder:
    """The holder of a lock found taken. It writes its name just after taking the lock: an empty file
    is read again for a moment before the holder is called unknown."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            written = path.stat().st_size > 0
        except FileNotFoundError:
            written = False
        if written or time.monotonic() > deadline:
            return _read_holder(path) or LockHolder(0, "an unknown machine", 0.0)
        time.sleep(0.01)


class RunLock:
    """The exclusive lock of one run folder, held by its trainer: `with RunLock(run_dir):`.

    `file`: another lock file of the folder held the same way (the project's queue runner)."""

    def __init__(self, run_dir: str | Path, file: str = LOCK_FILE) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / file
        self.stale: LockHolder | None = None  # the dead holder whose lock was taken over
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Take the lock or raise RunLockedError naming the live holder."""
        for _attempt in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if not try_lock(fd, exclusive=True, windows_byte=_WINDOWS_LOCK_OFFSET):
                os.close(fd)
                raise RunLockedError(self.run_dir, _live_holder(self.path))
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # the holder removed the file between our open and our lock: try again
                os.close(fd)
                continue
            self.stale = _read_holder(self.path) if os.fstat(fd).st_size else None
            if self.stale is not None:
                log.info("took over the stale lock of %s left by %s", self.run_dir, self.stale.describe())
            text = json.dumps(asdict(LockHolder(os.getpid(), socket.gethostname(), time.time())))
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)  # Windows has no pwrite, and its lock left the position far past the text
            os.write(fd, text.encode("utf-8"))
            os.fsync(fd)
            self._fd = fd
            return self
        raise RuntimeError(f"cannot take the lock {self.path}: it is replaced again and again")

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if WINDOWS_LOCKS:  # pragma: no cover - Windows removes no open file
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # while still locked, so nobody locks a file that is going away
        os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def lock_holder(run_dir: str | Path, file: str = LOCK_FILE) -> LockHolder | None:
    """The live process that holds the run's lock (or the folder's lock `file`), or None (no lock file, or a
    stale one)."""
    path = Path(run_dir) / file
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot open the lock file %s (%s); the run is taken as locked", path, exc)
        return _read_holder(path) or LockHolder(0, "an unknown machine", 0.0)
    try:
        if try_lock(fd, exclusive=False, windows_byte=_WINDOWS_LOCK_OFFSET):
            unlock(fd, windows_byte=_WINDOWS_LOCK_OFFSET)
            return None
    finally:
        os.close(fd)
    return _live_holder(path)


def write_process_file(run_dir: str | Path, pid: int) -> None:
    """Note the process the studio started for a run (pid and start time, so a recycled pid is told apart)."""
    import psutil

    try:
        create_time = psutil.Process(pid).create_time()
    except psutil.Error as exc:
        log.info("process %d of %s already ended (%s)", pid, run_dir, exc)
        create_time = 0.0
    atomic_write_text(Path(run_dir) / PROCESS_FILE, json.dumps({"pid": pid, "create_time": create_time}))


def process_file_alive(run_dir: str | Path) -> bool:
    """Is the process named in the run's process file still the one the studio started?"""
    import psutil

    path = Path(run_dir) / PROCESS_FILE
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        pid, create_time = int(info["pid"]), float(info.get("create_time", 0))
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the process file %s cannot be read (%s); taken as not running", path, exc)
        return False
    try:
        proc = psutil.Process(pid)
        # A recycled pid belongs to another program: its start time differs.
        return abs(proc.create_time() - create_time) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def trainer_alive(run_dir: str | Path) -> bool:
    """Is a trainer (or the launcher the studio started for it) working on this run folder now?"""
    return lock_holder(run_dir) is not None or process_file_alive(run_dir)
