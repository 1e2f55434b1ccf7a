"""Importing a run copied back from another machine (a folder or a .zip of one), with limits.

What is imported was written elsewhere, so every name goes through `contained_path`: `..`,
absolute names and drive letters are refused; a link is copied as a link only when its own
text stays inside the run, a link to a file of the run by an absolute name becomes a copy of
that file, and a link leading outside is left out (never followed), as are FIFOs, sockets and
devices (never opened: opening a FIFO waits for a writer forever). An archive is measured
before a byte is written: its total size, each member's compression ratio (a zip bomb) and
the free space here.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from studio.core.containment import (
    OutsideFolderError,
    contained_path,
    is_link_out,
    link_stays_inside,
    name_parts,
)
from studio.core.files import atomic_write_text, replace
from studio.core.runs.folders import CONFIG_FILE, EVENTS_FILE, REMOTE_FILE, is_run_dir

log = logging.getLogger(__name__)

# A run's files compress at most a few times (JSON lines, PNGs, safetensors); zeros made to look
# like a run compress a thousand times.
MAX_RATIO = 200.0
RATIO_FLOOR_BYTES = 1 << 20  # small members may compress far (an empty log, a short JSON)
MAX_IMPORT_BYTES = 200 * (1 << 30)
SPARE_BYTES = 256 * (1 << 20)  # left free after an import, so the studio can still write its files


class ImportRefused(ValueError):
    """An import that was refused before anything was written; the message names the entry."""


def import_run(source: str | Path, runs_dir: str | Path, warn: Callable[[str], None] | None = None) -> Path:
    """Bring a run copied back from another machine (a folder or a .zip) into `runs_dir`.

    The copy is marked remote; it is never resumed from here. Returns the new folder. The
    copy is made in a hidden folder and renamed into place once complete and marked, so a
    refused or failed import leaves nothing in the list of runs. What a folder holds that is
    left out (a link leading outside it, a FIFO, a socket, a device) is said to `warn` (default:
    the log), one message per entry naming it, and listed in the copy's remote.json.
    """
    left_out: list[str] = []

    def say(message: str) -> None:
        left_out.append(message)
        (warn or log.warning)(message)

    src = Path(source)
    target_root = Path(runs_dir)
    target_root.mkdir(parents=True, exist_ok=True)
    members: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] | None = None
    if src.is_dir():
        if not is_run_dir(src):
            raise ValueError(f"{src} is not a run folder: it has neither {CONFIG_FILE} nor {EVENTS_FILE}")
        name = src.resolve().name
        plan = _folder_plan(src, say)
        _check_room(src, target_root, sum(entry.size for entry in plan))
    elif zipfile.is_zipfile(src):
        name, members = _zip_members(src)
        _check_room(src, target_root, sum(info.file_size for info, _parts in members))
    else:
        raise ValueError(f"{src} is neither a run folder nor a .zip of one")
    name = _run_name(name, src)
    staging = Path(tempfile.mkdtemp(prefix=".import-", dir=target_root))
    try:
        if members is None:
            _copy_folder(src, plan, staging, say)
        else:
            _extract(src, members, staging)
        record = {"source": str(src), "imported": time.time(), "left_out": left_out}
        atomic_write_text(staging / REMOTE_FILE, json.dumps(record, indent=1))
        dest = _free_name(target_root, name)
        replace(staging, dest)  # on Windows, tried again while the antivirus scans the files just unpacked
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def _run_name(name: str, src: Path) -> str:
    """The imported run's folder name: one plain name, never `..` or a path."""
    try:
        (part,) = name_parts(name, Path("runs"), str(src))
    except (OutsideFolderError, ValueError):
        raise ImportRefused(f"{src}: the run folder's name {name!r} is not a plain folder name; "
                            "nothing was imported") from None
    if part.startswith("."):
        raise ImportRefused(f"{src}: the run folder's name {name!r} starts with a dot; nothing was imported")
    return part


def _free_name(root: Path, name: str) -> Path:
    candidate, counter = root / name, 2
    while candidate.exists():
        candidate = root / f"{name}-{counter}"
        counter += 1
    return candidate


def _check_room(src: Path, target_root: Path, total: int) -> None:
    if total > MAX_IMPORT_BYTES:
        raise ImportRefused(f"{src} would unpack to {total / 1e9:.1f} GB, more than a run holds "
                            f"({MAX_IMPORT_BYTES / 1e9:.0f} GB at most); nothing was imported")
    free = shutil.disk_usage(target_root).free
    if total + SPARE_BYTES > free:
        raise ImportRefused(f"{src} needs {total / 1e9:.2f} GB but {target_root} has {free / 1e9:.2f} GB free; "
                            "free some space (or import into another project) and try again; nothing was imported")


# ------------------------------------------------------------ a folder
@dataclass(frozen=True)
class _Entry:
    """One file of an imported folder: its bytes (from itself or from the file a link names), or a link
    kept as a link (relative, and inside the run)."""

    rel: str
    size: int = 0
    source: Path | None = None
    link: str | None = None


_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _SPECIAL if test(mode)), "not a file")


def _folder_plan(src: Path, warn: Callable[[str], None]) -> list[_Entry]:
    """What is copied of every entry. Nothing is opened here (a FIFO would block): entries are told
    apart by `os.lstat`. A link is kept when its own text stays inside the run, its target's bytes are
    copied when it names a file of the run by another way (an absolute name), and it is left out
    (with a warning) when it leads outside; special files are left out with a warning."""
    plan: list[_Entry] = []
    for folder, dirs, files in os.walk(src, followlinks=False):
        here = Path(folder)
        for entry in sorted([*dirs, *files]):
            path = here / entry
            rel = path.relative_to(src).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                plan.extend(_link_entry(src, path, rel, warn))
            elif stat.S_ISREG(mode):
                plan.append(_Entry(rel, os.lstat(path).st_size, source=path))
            elif not stat.S_ISDIR(mode):
                warn(f"{src}: left out {rel!r}: {_kind(mode)}, not a file; special files are never opened "
                     "or copied (the rest of the run was imported)")
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
    return plan


def _link_entry(src: Path, path: Path, rel: str, warn: Callable[[str], None]) -> list[_Entry]:
    text, real = os.readlink(path), Path(os.path.realpath(path))
    if is_link_out(path, src):
        warn(f"{src}: left out {rel!r}: a link to {real}, outside the run folder (links are never followed "
             "out of a run); if the run needs that file, copy it into the run folder and import it again")
        return []
    if link_stays_inside(text, rel):
        return [_Entry(rel, link=text)]
    try:
        target = os.lstat(real)
    except OSError:
        target = None
    if target is not None and stat.S_ISREG(target.st_mode):
        return [_Entry(rel, target.st_size, source=real)]  # named by an absolute path: its bytes, not the name
    what = "a folder" if target is not None and stat.S_ISDIR(target.st_mode) else "nothing that can be copied"
    warn(f"{src}: left out {rel!r}: a link by absolute name to {what} ({real}); the run's own files are "
         "imported under their own names")
    return []


def _copy_file(source: Path, out: Path) -> bool:
    """Copy one regular file; False (nothing written) when it is no longer one (a FIFO put in its place).
    Opened without blocking and without following a link, and checked before a byte is read."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    with os.fdopen(os.open(source, flags), "rb") as fin:
        if not stat.S_ISREG(os.fstat(fin.fileno()).st_mode):
            return False
        with open(out, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    shutil.copystat(source, out)
    return True


def _copy_folder(src: Path, plan: list[_Entry], dest: Path, warn: Callable[[str], None]) -> None:
    for entry in plan:
        out = contained_path(dest, entry.rel, str(src))
        out.parent.mkdir(parents=True, exist_ok=True)
        if entry.link is not None:
            os.symlink(entry.link, out)  # relative and inside the run: checked by _folder_plan
        elif entry.source is not None and not _copy_file(entry.source, out):
            warn(f"{src}: left out {entry.rel!r}: it stopped being a file during the import; special files "
                 "are never opened or copied")
    for link in [p for p in dest.rglob("*") if p.is_symlink() and is_link_out(p, dest)]:
        link.unlink()  # a link that leads out of the imported run through others: never kept
        warn(f"{src}: left out {link.relative_to(dest).as_posix()!r}: a link that leads outside the imported "
             "run folder")


# ------------------------------------------------------------ a zip
def _zip_members(src: Path) -> tuple[str, list[tuple[zipfile.ZipInfo, tuple[str, ...]]]]:
    """(run name, [(member, parts inside the run)]) of a zipped run; refused before anything is written."""
    try:
        with zipfile.ZipFile(src) as archive:
            infos = [i for i in archive.infolist() if not i.is_dir()]
    except zipfile.BadZipFile as exc:  # e.g. one part of an archive split over several files
        raise ImportRefused(f"{src} cannot be read as a zip ({exc}); nothing was imported") from None
    folders = [PurePosixPath(i.filename.replace("\\", "/")).parent for i in infos
               if PurePosixPath(i.filename.replace("\\", "/")).name == EVENTS_FILE]
    if not folders:
        raise ValueError(f"{src} holds no {EVENTS_FILE}: it is not a zipped run folder")
    # The run folders, not folders inside one; several (a zipped runs/ folder) would import only one.
    runs = sorted({str(f) for f in folders if not any(f != other and f.is_relative_to(other) for other in folders)})
    if len(runs) > 1:
        shown = ", ".join(repr(r) for r in runs[:5]) + (", ..." if len(runs) > 5 else "")
        raise ImportRefused(f"{src} holds {len(runs)} runs ({shown}); a zip brings one run: unzip it and import "
                            "each run folder; nothing was imported")
    prefix = runs[0]
    prefix = "" if prefix == "." else prefix + "/"
    members = []
    for info in infos:
        unified = info.filename.replace("\\", "/")
        try:
            parts = name_parts(unified, Path(src.name), str(src))
        except OutsideFolderError as exc:
            raise ImportRefused(f"{exc}; nothing was imported") from None
        if not unified.startswith(prefix):
            continue
        if info.flag_bits & 0x1:
            raise ImportRefused(f"{src}: refused {info.filename!r}: it is encrypted (a zip with a password); unzip "
                                "it yourself and import the run folder; nothing was imported")
        if _is_zip_link(info):
            raise ImportRefused(f"{src}: refused {info.filename!r}: a symbolic link (links are never unpacked); "
                                "nothing was imported")
        if info.file_size > RATIO_FLOOR_BYTES and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise ImportRefused(f"{src}: refused {info.filename!r}: {info.compress_size} bytes that unpack to "
                                f"{info.file_size} (more than {MAX_RATIO:.0f} times: not a run's file); "
                                "nothing was imported")
        members.append((info, parts[len(PurePosixPath(prefix).parts):]))
    return PurePosixPath(prefix).name or src.stem, members


def _is_zip_link(info: zipfile.ZipInfo) -> bool:
    return (info.external_attr >> 16) & 0o170000 == 0o120000


def _extract(src: Path, members: list[tuple[zipfile.ZipInfo, tuple[str, ...]]], dest: Path) -> None:
    with zipfile.ZipFile(src) as archive:
        for info, parts in members:
            out = contained_path(dest, "/".join(parts), str(src))
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                _extract_member(src, archive, info, out)
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
                # Damaged on its way (a wrong checksum, cut short), or packed with a method Python does not
                # read (Deflate64: Windows' own "compressed folder" uses it for large files).
                raise ImportRefused(f"{src}: {info.filename!r} cannot be unpacked ({exc}): the archive is damaged "
                                    "or packed in a way the studio cannot read; copy it again, or zip the run "
                                    "folder with another tool (or import the folder itself); nothing was "
                                    "imported") from None


def _extract_member(src: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, out: Path) -> None:
    written = 0
    with archive.open(info) as fin, open(out, "wb") as fout:
        # The header's size is the limit: a member that lies about it stops here.
        while chunk := fin.read(1 << 20):
            written += len(chunk)
            if written > info.file_size:
                raise ImportRefused(f"{src}: {info.filename!r} unpacks to more than the {info.file_size} "
                                    "bytes its header says; nothing was imported")
            fout.write(chunk)
