"""Safe file writes: nothing a person had is lost when a write fails halfway; and the OS file locks."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
try:
    import msvcrt
except ImportError:
    msvcrt = None  # type: ignore[assignment]

# Windows locks byte ranges and removes no open file; POSIX flocks the whole file.
WINDOWS_LOCKS = fcntl is None and msvcrt is not None

# The temporary files of the writes below and of the caption store: ".NAME.XXXXXXXX.tmp".
TEMP_NAME = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")
# A save renames its temporary file within milliseconds; one this old was left by a killed save.
STALE_TEMP_S = 300.0


# How long a replace on Windows is tried again while another program has the file open.
REPLACE_PATIENCE_S = 2.0


Move = Callable[[str | Path, str | Path], None]


def replace(source: str | Path, target: str | Path, move: Move | None = None) -> None:
    """`os.replace`, tried again on Windows for up to REPLACE_PATIENCE_S while another program has `target`
    open: Windows refuses to replace an open file, and its antivirus scan or search indexer opens a file
    just written for a moment, so a caption or a settings file saved twice in a row failed now and then.
    `move`: another way of moving (`os.rename`, which never replaces), tried again the same way."""
    deadline: float | None = None
    pause = 0.01
    while True:
        try:
            (move or os.replace)(source, target)
            return
        except PermissionError:
            if sys.platform != "win32":
                raise
            now = time.monotonic()
            deadline = deadline if deadline is not None else now + REPLACE_PATIENCE_S
            if now >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp, path.stat().st_mode & 0o7777)
        replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    atomic_write_bytes(path, text.encode(encoding))


def leftover_temp_files(folder: str | Path, min_age_s: float = STALE_TEMP_S) -> list[Path]:
    """Temporary files of interrupted saves in `folder` (not its subfolders), at least `min_age_s` old."""
    cutoff = time.time() - min_age_s
    found = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if TEMP_NAME.match(entry.name) and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        if entry.stat(follow_symlinks=False).st_mtime <= cutoff:
                            found.append(Path(entry.path))
    except OSError:
        return []
    return sorted(found)


def remove_leftover_temp_files(folders: Iterable[str | Path], min_age_s: float = STALE_TEMP_S) -> list[Path]:
    """Delete what interrupted saves left in `folders`; returns the files removed."""
    removed = []
    for folder in dict.fromkeys(Path(f) for f in folders):
        for path in leftover_temp_files(folder, min_age_s):
            try:
                path.unlink()
            except OSError:
                continue  # gone already, or not ours to delete: the check lists it
            removed.append(path)
    return removed


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def try_lock(fd: int, exclusive: bool = True, windows_byte: int = 0) -> bool:
    """Take the OS lock of the open file `fd` without waiting; False when another open file holds it. The
    kernel drops it when the process ends, however it ends. Windows has exclusive locks only, on one byte
    (`windows_byte`: one far past a file's text keeps it readable by others)."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    if msvcrt is not None:  # pragma: no cover - Windows
        os.lseek(fd, windows_byte, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
    return True  # pragma: no cover - a platform with no file locks at all


def unlock(fd: int, windows_byte: int = 0) -> None:
    """Let go of `try_lock`'s lock."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    elif msvcrt is not None:  # pragma: no cover - Windows
        os.lseek(fd, windows_byte, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
