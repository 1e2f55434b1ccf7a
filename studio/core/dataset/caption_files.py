"""Caption files on disk: batches of atomic writes, and the save work that can run off the GUI thread.

A `SaveBatch` is made by the caption store (which knows what changed) and holds plain
data only, so its `run` can do all the file work in a worker thread while the person
keeps editing; the store takes the outcome back afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.dataset.caption_sources import read_caption_file

# Past this many files one sync() of the whole system is cheaper than one fsync() per file.
_BATCH_SYNC_FILES = 8


def _create_temp(path: Path, mode: int) -> tuple[int, str]:
    """An exclusive new file next to `path` (same folder, so the rename is atomic), open for writing."""
    for _ in range(100):
        tmp = os.path.join(path.parent, f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


def write_texts_atomically(texts: Mapping[Path, str]) -> dict[Path, OSError]:
    """Write every file as UTF-8 so that a crash at any moment leaves each either old or new, never half written.

    Why the guarantee holds: each text goes to a new temporary file in the file's own
    folder; the data of every temporary file is on disk (one fsync each, or for a large
    batch on Linux one sync(), which returns only once all dirty data is written) before
    any rename; then each temporary file is renamed over its target, and a rename within
    one folder is atomic. Finally the folders are synced so the new names themselves
    survive a power cut. Nothing is ever written into the target file in place.
    Returns the files that could not be written, with the error; those are left untouched.
    """
    failed: dict[Path, OSError] = {}
    temps: list[tuple[str, Path]] = []
    batch_sync = sys.platform.startswith("linux") and len(texts) > _BATCH_SYNC_FILES
    for path, text in texts.items():
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            failed[path] = exc
            continue
        try:
            fd, tmp = _create_temp(path, 0o666 if mode is None else mode)
        except OSError as exc:
            failed[path] = exc
            continue
        try:
            try:
                os.write(fd, text.encode("utf-8"))
                if mode is not None and hasattr(os, "fchmod"):
                    os.fchmod(fd, mode)  # the umask may have dropped bits the old file had
                if not batch_sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if mode is not None and not hasattr(os, "fchmod"):
                os.chmod(tmp, mode)
            temps.append((tmp, path))
        except OSError as exc:
            failed[path] = exc
            _unlink(tmp)
    if batch_sync and temps:
        os.sync()  # Linux's sync() waits until every written page is on disk
    folders: set[str] = set()
    for tmp, path in temps:
        try:
            os.replace(tmp, path)
            folders.add(os.path.dirname(tmp))
        except OSError as exc:
            failed[path] = exc
            _unlink(tmp)
    for folder in folders:
        _sync_folder(folder)
    return failed


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
    try:
        return read_caption_file(path)[0]
    except FileNotFoundError:
        return None


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
        writes: dict[Path, str] = {}
        owners: dict[Path, FileJob] = {}
        for job in self.sidecars:
            if job.check:
                try:
                    disk = read_text_or_none(job.target)
                except OSError as exc:
                    job.outcome, job.error = "error", exc
                    continue
                stale = disk != job.expected and (job.remove or disk != job.text)
                if stale and not (job.remove and disk is None):
                    job.outcome, job.disk = "conflict", disk
                    continue
            if job.remove:
                try:
                    job.target.unlink(missing_ok=True)
                except OSError as exc:
                    job.outcome, job.error = "error", exc
                else:
                    job.outcome = "saved"
                continue
            writes[job.target] = job.text
            owners[job.target] = job
        failed = write_texts_atomically(writes)
        for target, job in owners.items():
            if target in failed:
                job.outcome, job.error = "error", failed[target]
            else:
                job.outcome = "saved"
        for jsonl, rows in self.metadata.items():
            _save_metadata(jsonl, rows)
        self.done = True


def _save_metadata(jsonl: Path, jobs: list[FileJob]) -> None:
    """Rewrite the rows of `jobs` in a metadata.jsonl; other keys, rows and broken lines stay as they are."""
    try:
        lines = jsonl.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        for job in jobs:
            job.outcome, job.error = "error", exc
        return
    rows: dict[Path, int] = {}
    for number, line in enumerate(lines):
        try:
            row = json.loads(line)
            rows[Path(os.path.normpath(jsonl.parent / row["file_name"]))] = number
        except (json.JSONDecodeError, TypeError, KeyError):
            continue
    written: list[FileJob] = []
    for job in jobs:
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
        return
    failed = write_texts_atomically({jsonl: "\n".join(lines) + "\n"})
    for job in written:
        if jsonl in failed:
            job.outcome, job.error = "error", failed[jsonl]
        else:
            job.outcome = "saved"
