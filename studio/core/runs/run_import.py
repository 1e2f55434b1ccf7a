"""Importing a run copied back from another machine (a folder or a .zip of one), with limits.

What is imported was written elsewhere, so every name goes through `contained_path`: `..`,
absolute names and drive letters are refused, a link is copied as a link only when it stays
inside the run (never followed), and an archive is measured before a byte is written: its
total size, each member's compression ratio (a zip bomb) and the free space here.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path, PurePosixPath

from studio.core.containment import OutsideFolderError, contained_path, is_link_out, name_parts
from studio.core.files import atomic_write_text
from studio.core.runs.folders import CONFIG_FILE, EVENTS_FILE, REMOTE_FILE, is_run_dir

# A run's files compress at most a few times (JSON lines, PNGs, safetensors); zeros made to look
# like a run compress a thousand times.
MAX_RATIO = 200.0
RATIO_FLOOR_BYTES = 1 << 20  # small members may compress far (an empty log, a short JSON)
MAX_IMPORT_BYTES = 200 * (1 << 30)
SPARE_BYTES = 256 * (1 << 20)  # left free after an import, so the studio can still write its files


class ImportRefused(ValueError):
    """An import that was refused before anything was written; the message names the entry."""


def import_run(source: str | Path, runs_dir: str | Path) -> Path:
    """Bring a run copied back from another machine (a folder or a .zip) into `runs_dir`.

    The copy is marked remote; it is never resumed from here. Returns the new folder. The
    copy is made in a hidden folder and renamed into place once complete and marked, so a
    refused or failed import leaves nothing in the list of runs.
    """
    src = Path(source)
    target_root = Path(runs_dir)
    target_root.mkdir(parents=True, exist_ok=True)
    members: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] | None = None
    if src.is_dir():
        if not is_run_dir(src):
            raise ValueError(f"{src} is not a run folder: it has neither {CONFIG_FILE} nor {EVENTS_FILE}")
        name = src.resolve().name
        plan = _folder_plan(src)
        _check_room(src, target_root, sum(size for _rel, size, _link in plan))
    elif zipfile.is_zipfile(src):
        name, members = _zip_members(src)
        _check_room(src, target_root, sum(info.file_size for info, _parts in members))
    else:
        raise ValueError(f"{src} is neither a run folder nor a .zip of one")
    name = _run_name(name, src)
    staging = Path(tempfile.mkdtemp(prefix=".import-", dir=target_root))
    try:
        if members is None:
            _copy_folder(src, plan, staging)
        else:
            _extract(src, members, staging)
        atomic_write_text(staging / REMOTE_FILE, json.dumps({"source": str(src), "imported": time.time()}, indent=1))
        dest = _free_name(target_root, name)
        staging.rename(dest)
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
def _folder_plan(src: Path) -> list[tuple[str, int, str | None]]:
    """(relative name, size, link target or None) of every entry; refuses a link that leads out."""
    plan: list[tuple[str, int, str | None]] = []
    for folder, dirs, files in os.walk(src, followlinks=False):
        here = Path(folder)
        for entry in sorted([*dirs, *files]):
            path = here / entry
            rel = path.relative_to(src).as_posix()
            if path.is_symlink():
                if is_link_out(path, src):
                    raise ImportRefused(f"{src}: refused {rel!r}: a link to {os.path.realpath(path)}, outside the "
                                        "run folder (links are never followed); remove it and import again; "
                                        "nothing was imported")
                plan.append((rel, 0, os.readlink(path)))
            elif entry in files:
                plan.append((rel, path.stat().st_size, None))
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
    return plan


def _copy_folder(src: Path, plan: list[tuple[str, int, str | None]], dest: Path) -> None:
    for rel, _size, link in plan:
        out = contained_path(dest, rel, str(src))
        out.parent.mkdir(parents=True, exist_ok=True)
        if link is not None:
            os.symlink(link, out)  # stays inside the run: checked by _folder_plan
        else:
            shutil.copy2(src / rel, out, follow_symlinks=False)


# ------------------------------------------------------------ a zip
def _zip_members(src: Path) -> tuple[str, list[tuple[zipfile.ZipInfo, tuple[str, ...]]]]:
    """(run name, [(member, parts inside the run)]) of a zipped run; refused before anything is written."""
    with zipfile.ZipFile(src) as archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
    marker = next((i.filename for i in infos if PurePosixPath(i.filename.replace("\\", "/")).name == EVENTS_FILE),
                  None)
    if marker is None:
        raise ValueError(f"{src} holds no {EVENTS_FILE}: it is not a zipped run folder")
    prefix = str(PurePosixPath(marker.replace("\\", "/")).parent)
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
            written = 0
            with archive.open(info) as fin, open(out, "wb") as fout:
                # The header's size is the limit: a member that lies about it stops here.
                while chunk := fin.read(1 << 20):
                    written += len(chunk)
                    if written > info.file_size:
                        raise ImportRefused(f"{src}: {info.filename!r} unpacks to more than the {info.file_size} "
                                            "bytes its header says; nothing was imported")
                    fout.write(chunk)
