"""Caption writes that never overwrite a newer edit, and the clean-up of what a killed save left.

Two of the studio's writers save captions into the same folders: the Dataset page (in the
window's process) and `studio-train caption` (a process of its own); a person's editor or
script may write there too. Three things keep a save from overwriting an edit it never saw:

- The studio's writers take the folder's lock (`.studio-captions.lock`, an OS lock on the
  open file that dies with the process) around each batch, from reading what is on disk
  to the last rename: two studio writers never interleave in one folder.
- Each file's `Snapshot` (identity, size, mtime and bytes) is taken when it is checked and
  compared again at the replace. On Linux the new file is swapped in with
  `renameat2(RENAME_EXCHANGE)` and the file it displaced is compared: if another program
  changed or replaced it at any moment before the swap, the swap is undone and the save is a
  conflict. A file that did not exist is created with a hard link, which fails when another
  program created it meanwhile. Elsewhere the snapshot is compared right before `os.replace`.
- What no check can see: another program that opened the file before the swap and writes
  into it afterwards writes into the replaced file (as with any rename-based save).

Temporary files of a save killed halfway are removed when a folder is opened and after a
job: all of the caption writer's own at once when nobody holds the folder's lock (a live
writer always does), any other only once it is old enough to belong to nobody.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from studio.core.dataset.captions.caption_sources import CAPTION_EXTENSIONS, METADATA_FILE
from studio.core.files import STALE_TEMP_S, TEMP_NAME, leftover_temp_files, replace, try_lock, unlock

FOLDER_LOCK = ".studio-captions.lock"
# The captioner's progress file lives in the dataset folder and is written by the same writer.
PROGRESS_FILE = ".studio-caption-progress.json"
# A studio writer holds a folder's lock for one batch (seconds); this long means something hangs.
LOCK_TIMEOUT_S = 120.0
_RENAME_EXCHANGE = 2


class FileChanged(OSError):
    """The file changed on disk after it was checked; nothing of ours was written over it."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.EAGAIN, "changed by another program since it was read", str(path))


class FolderBusy(OSError):
    """Another writer of the studio has held a folder's caption lock for too long."""


@dataclass(frozen=True)
class Snapshot:
    """A file as it was checked: which file it is (device, inode), its size, mtime and bytes."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    data: bytes


def read_snapshot(path: str | Path) -> Snapshot | None:
    """The file's snapshot, or None when there is no file. Other OSErrors are raised.

    The status is taken before the bytes are read: a change made while reading shows as a
    changed snapshot later (a conflict reported, never an edit lost).
    """
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None
    with handle:
        st = os.fstat(handle.fileno())
        data = handle.read()
    return Snapshot(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, data)


# ------------------------------------------------------------ the folder lock

def _open_lock(folder: str) -> int | None:
    try:
        return os.open(os.path.join(folder, FOLDER_LOCK), os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
    except OSError:
        return None  # a read-only folder: nothing can be saved there anyway, and the save says so


def _unlock_and_close(fd: int) -> None:
    with contextlib.suppress(OSError):
        unlock(fd)
    os.close(fd)


@contextlib.contextmanager
def folder_locks(folders: Iterable[str | Path], timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the caption lock of every folder (taken in sorted order, so two writers never deadlock)."""
    held: list[int] = []
    try:
        for folder in sorted({os.fspath(f) for f in folders}):
            fd = _open_lock(folder)
            if fd is None:
                continue
            deadline = time.monotonic() + timeout_s
            pause = 0.001
            while not try_lock(fd):
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise FolderBusy(errno.EBUSY, f"another studio process has been saving captions in {folder} "
                                                  f"for over {timeout_s:.0f} s; close it or try again", folder)
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
            held.append(fd)
        yield
    finally:
        for fd in reversed(held):
            _unlock_and_close(fd)


@contextlib.contextmanager
def _lock_if_free(folder: str) -> Iterator[bool]:
    """True inside when no studio writer is saving in the folder: its lock was free and is held
    by this process now, or there is no lock file (no writer ever started there; one that starts
    now makes only new temporary files). The lock file is never created here: opening a folder
    writes nothing into it."""
    try:
        fd = os.open(os.path.join(folder, FOLDER_LOCK), os.O_RDWR | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        yield True
        return
    except OSError:
        yield False
        return
    if not try_lock(fd):
        os.close(fd)
        yield False
        return
    try:
        yield True
    finally:
        _unlock_and_close(fd)


# ------------------------------------------------------------ the replace

def _renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None  # a C library without renameat2 (glibc < 2.28, some musl builds)
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _renameat2()
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap two names atomically; False where the system or filesystem cannot (then nothing changed)."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), b)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def replace_unchanged(tmp: str, target: Path, before: Snapshot | None) -> None:
    """Put the file `tmp` in the place of `target` only if `target` is still as `before` saw it.

    Raises FileChanged (and removes `tmp`) when it is not. `before` None: there was no file,
    and the new one is created only if still nobody made one.
    """
    try:
        if before is None:
            _create_new(tmp, target)
            return
        try:
            swapped = _exchange(tmp, str(target))
        except FileNotFoundError:
            raise FileChanged(target) from None  # deleted meanwhile: the deletion stands
        if swapped:
            displaced = read_snapshot(tmp)
            if displaced != before:
                _exchange(tmp, str(target))  # theirs back in place; ours goes
                raise FileChanged(target)
            return
        if read_snapshot(target) != before:
            raise FileChanged(target)
        replace(tmp, target)
    finally:
        if os.path.lexists(tmp):
            _unlink(tmp)


def _create_new(tmp: str, target: Path) -> None:
    if sys.platform == "win32":  # Windows' rename never replaces; tried again while the antivirus scans `tmp`
        try:
            replace(tmp, target, move=os.rename)
        except FileExistsError:
            raise FileChanged(target) from None
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise FileChanged(target) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # A filesystem without hard links (FAT, some network shares): check, then rename.
        if os.path.lexists(target):
            raise FileChanged(target) from None
        os.replace(tmp, target)


# ------------------------------------------------------------ leftovers of killed saves

def _is_caption_temp(name: str, extensions: Iterable[str]) -> bool:
    """A temporary file of the caption writer: `.NAME.XXXXXXXX.tmp` whose NAME is a caption file."""
    if not TEMP_NAME.match(name):
        return False
    inner = name[1:-len(".XXXXXXXX.tmp")]
    return inner in (METADATA_FILE, PROGRESS_FILE) or os.path.splitext(inner)[1].lower() in extensions


def remove_caption_leftovers(folders: Iterable[str | Path], caption_extension: str = ".txt") -> list[Path]:
    """Delete the temporary files interrupted saves left in `folders`; returns what was removed.

    A folder whose lock is free has no studio writer saving in it, so every caption temp
    file there is a leftover, whatever its age. Other temporary files (and every one while
    a writer holds the lock) go only once older than a save ever takes.
    """
    extensions = {e.lower() for e in (*CAPTION_EXTENSIONS, caption_extension)}
    removed: list[Path] = []
    for folder in dict.fromkeys(os.fspath(f) for f in folders):
        # Listed before the lock is asked: a save that starts after the listing makes only new names.
        old = set(leftover_temp_files(folder, STALE_TEMP_S))
        young = {p for p in leftover_temp_files(folder, 0.0) if _is_caption_temp(p.name, extensions)}
        with _lock_if_free(folder) as free:
            for path in sorted(old | young if free else old):
                try:
                    path.unlink()
                except OSError:
                    continue  # gone already, or not ours to delete: the dataset check lists it
                removed.append(path)
    return removed
