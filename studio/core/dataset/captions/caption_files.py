"""Caption files on disk: batches of atomic writes, and the save work that can run off the GUI thread.

A `SaveBatch` is made by the caption store (which knows what changed) and holds plain
data only, so its `run` can do all the file work in a worker thread while the person
keeps editing; the store takes the outcome back afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.dataset.captions.caption_guard import (
    FileChanged,
    Snapshot,
    folder_locks,
    read_snapshot,
    replace_unchanged,
)
from studio.core.dataset.captions.caption_sources import decode_caption, jsonl_lines
from studio.core.files import replace

# Past this many files the fsyncs run side by side: the filesystem commits them together.
_PARALLEL_SYNC_FILES = 8
_SYNC_THREADS = 8


# The longest file name most file systems take, in bytes (Windows: UTF-16 units, never more than the bytes).
_NAME_MAX = 255


def _temp_name(name: str) -> str:
    """`.NAME.XXXXXXXX.tmp` (TEMP_NAME), its NAME shortened to fit when a caption's own name is long (80 Japanese
    characters are 240 bytes): the extension stays, by which a leftover is known as a caption's."""
    suffix = f".{secrets.token_hex(4)}.tmp"
    room = _NAME_MAX - 1 - len(suffix)
    stem, ext = os.path.splitext(name)
    while len(os.fsencode(stem + ext)) > room and stem:
        stem = stem[:-1]
    return f".{stem}{ext}{suffix}"


def _create_temp(path: Path, mode: int) -> tuple[int, str]:
    """An exclusive new file next to `path` (same folder, so the rename is atomic), open for writing."""
    for _ in range(100):
        tmp = os.path.join(path.parent, _temp_name(path.name))
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


def write_texts_atomically(texts: Mapping[Path, str | bytes],
                           unchanged: Mapping[Path, Snapshot | None] | None = None) -> dict[Path, OSError]:
    """Write every file (a text as UTF-8, bytes as they are) so that a crash at any moment leaves each either
    old or new, never half written.

    Why the guarantee holds: each text goes to a new temporary file in the file's own
    folder; the data of every temporary file is on disk (one fsync each) before any
    rename; then each temporary file is renamed over its target, and a rename within one
    folder is atomic. Finally the folders are synced so the new names themselves survive
    a power cut. Nothing is ever written into the target file in place.

    The folders' caption locks are held throughout (see `caption_guard`). A file named in
    `unchanged` is replaced only if it is still as its snapshot saw it (None: still absent);
    otherwise its error is a `FileChanged` and the file stays as the other program left it.
    Returns the files that could not be written, with the error; those are left untouched.
    """
    with folder_locks(path.parent for path in texts):
        return _write_locked(texts, unchanged or {})


def _write_locked(texts: Mapping[Path, str | bytes], unchanged: Mapping[Path, Snapshot | None]) -> dict[Path, OSError]:
    failed: dict[Path, OSError] = {}
    temps: dict[Path, str] = {}
    items = list(texts.items())
    try:
        if len(items) > _PARALLEL_SYNC_FILES:
            # The fsyncs run side by side: the filesystem commits them together, not one journal commit each.
            with ThreadPoolExecutor(_SYNC_THREADS) as pool:
                written = list(pool.map(_write_temp, items))
        else:
            written = [_write_temp(item) for item in items]
        for (path, _text), (tmp, error) in zip(items, written, strict=True):
            if tmp is not None:
                temps[path] = tmp
            if error is not None:
                failed[path] = error
        folders: set[str] = set()
        for path, tmp in temps.items():
            if path in failed:
                continue
            try:
                if path in unchanged:
                    replace_unchanged(tmp, path, unchanged[path])
                else:
                    replace(tmp, path)
                folders.add(os.path.dirname(tmp))
            except OSError as exc:
                failed[path] = exc
        for folder in folders:
            _sync_folder(folder)
    finally:
        # Whatever happened (an error, Ctrl+C, a stop signal), no temporary file stays behind.
        for tmp in temps.values():
            if os.path.lexists(tmp):
                _unlink(tmp)
    return failed


def _write_temp(item: tuple[Path, str | bytes]) -> tuple[str | None, OSError | None]:
    """(temporary file, error) of one text written and synced next to its target (its own data only)."""
    path, text = item
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        return None, exc
    try:
        fd, tmp = _create_temp(path, 0o666 if mode is None else mode)
    except OSError as exc:
        return None, exc
    try:
        try:
            data = memoryview(text if isinstance(text, bytes) else text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data):]
            if mode is not None and hasattr(os, "fchmod"):
                os.fchmod(fd, mode)  # the umask may have dropped bits the old file had
            os.fsync(fd)
        finally:
            os.close(fd)
        if mode is not None and not hasattr(os, "fchmod"):  # pragma: no cover - Windows
            os.chmod(tmp, mode)
    except OSError as exc:
        _unlink(tmp)
        return None, exc
    except BaseException:
        _unlink(tmp)
        raise
    return tmp, None


def _sync_folder(folder: str) -> None:
    """Make renames in `folder` durable (POSIX); the content was already safe either way."""
    if sys.platform == "win32":
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def read_text_or_none(path: Path) -> str | None:
    snapshot = read_snapshot(path)
    return None if snapshot is None else decode_caption(snapshot.data)[0]


def metadata_text(row: dict[str, object]) -> str:
    return str(row.get("text", row.get("caption", ""))).replace("\r\n", "\n").strip()


@dataclass
class FileJob:
    """One caption to save; `outcome` and what goes with it are filled in by `SaveBatch.run`."""

    image: Path
    target: Path  # sidecar or metadata.jsonl
    text: str  # what to write
    expected: str | None  # what the studio believes the file holds (None: no file of ours)
    check: bool = True  # compare the file with `expected` first; False when the person chose to overwrite
    remove: bool = False  # delete the sidecar the studio made instead of writing
    data: bytes | None = None  # the file's bytes as the scan read them, written instead of `text` (an undo)
    displaced: bytes | None = None  # the file's bytes before this write, as its check read them
    outcome: str = ""  # "saved" | "conflict" | "error"
    disk: str | None = None  # the text found on disk, for a conflict
    error: OSError | None = None


@dataclass
class SaveBatch:
    """Caption saves decided on the GUI side, done by `run` anywhere (it touches files only)."""

    sidecars: list[FileJob] = field(default_factory=list)
    metadata: dict[Path, list[FileJob]] = field(default_factory=dict)  # metadata.jsonl -> its rows
    done: bool = False

    @property
    def jobs(self) -> list[FileJob]:
        return self.sidecars + [job for rows in self.metadata.values() for job in rows]

    def __len__(self) -> int:
        return len(self.sidecars) + sum(len(rows) for rows in self.metadata.values())

    def run(self) -> None:
        """Check and write every job while the folders' caption locks are held, so no other studio
        writer saves in between; a file another program changes meanwhile is a conflict."""
        folders = {job.target.parent for job in self.jobs}
        try:
            with folder_locks(folders):
                self._run_locked()
        except OSError as exc:  # the lock could not be had: every job is as it was
            for job in self.jobs:
                if not job.outcome:
                    job.outcome, job.error = "error", exc
        self.done = True

    def _run_locked(self) -> None:
        writes: dict[Path, str | bytes] = {}
        owners: dict[Path, FileJob] = {}
        snapshots: dict[Path, Snapshot | None] = {}
        for job in self.sidecars:
            if job.check:
                try:
                    snapshot = read_snapshot(job.target)
                except OSError as exc:
                    job.outcome, job.error = "error", exc
                    continue
                disk = None if snapshot is None else decode_caption(snapshot.data)[0]
                stale = disk != job.expected and (job.remove or disk != job.text)
                if stale and not (job.remove and disk is None):
                    job.outcome, job.disk = "conflict", disk
                    continue
                snapshots[job.target] = snapshot
                job.displaced = None if snapshot is None else snapshot.data
            if job.remove:
                try:
                    job.target.unlink(missing_ok=True)
                except OSError as exc:
                    job.outcome, job.error = "error", exc
                else:
                    job.outcome = "saved"
                continue
            writes[job.target] = job.text if job.data is None else job.data
            owners[job.target] = job
        failed = _write_locked(writes, snapshots)
        for target, job in owners.items():
            error = failed.get(target)
            if isinstance(error, FileChanged):
                job.outcome, job.disk = "conflict", read_text_or_none(target)
            elif error is not None:
                job.outcome, job.error = "error", error
            else:
                job.outcome = "saved"
        for jsonl, rows in self.metadata.items():
            _save_metadata(jsonl, rows)


def _save_metadata(jsonl: Path, jobs: list[FileJob]) -> None:
    """Rewrite the rows of `jobs` in a metadata.jsonl; other keys, rows and broken lines stay as they are.

    The file is written only if nobody changed it since it was read here; if somebody did,
    it is read and compared again (their change may be to other rows).
    """
    for _attempt in range(3):
        if _try_save_metadata(jsonl, jobs):
            return
    for job in jobs:
        if not job.outcome:
            job.outcome, job.disk = "conflict", None


def _try_save_metadata(jsonl: Path, jobs: list[FileJob]) -> bool:
    """False when the file changed between the read and the write (nothing was written)."""
    try:
        snapshot = read_snapshot(jsonl)
        if snapshot is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(jsonl))
        try:
            lines = jsonl_lines(snapshot.data.decode("utf-8-sig"))
        except UnicodeDecodeError:
            raise OSError(errno.EILSEQ, "it is not UTF-8 text, so it is not rewritten", str(jsonl)) from None
    except OSError as exc:
        for job in jobs:
            job.outcome, job.error = "error", exc
        return True
    rows: dict[Path, int] = {}
    for number, line in enumerate(lines):
        try:
            row = json.loads(line)
            rows[Path(os.path.normpath(jsonl.parent / row["file_name"]))] = number
        except (json.JSONDecodeError, TypeError, KeyError):
            continue
    written: list[FileJob] = []
    for job in jobs:
        job.outcome, job.disk = "", None
        found = rows.get(job.image)
        if found is None:
            row = {"file_name": job.image.relative_to(jsonl.parent).as_posix(), "text": job.text}
            lines.append(json.dumps(row, ensure_ascii=False))
            written.append(job)
            continue
        row = json.loads(lines[found])
        disk = metadata_text(row)
        if job.check and disk != job.expected and disk != job.text:
            job.outcome, job.disk = "conflict", disk
            continue
        row["caption" if "text" not in row and "caption" in row else "text"] = job.text
        lines[found] = json.dumps(row, ensure_ascii=False)
        written.append(job)
    if not written:
        return True
    failed = _write_locked({jsonl: "\n".join(lines) + "\n"}, {jsonl: snapshot})
    error = failed.get(jsonl)
    if isinstance(error, FileChanged):
        return False
    for job in written:
        if error is not None:
            job.outcome, job.error = "error", error
        else:
            job.outcome = "saved"
    return True
