"""Which files of a dataset folder go into a bundle: what the trainer reads, nothing else.

A bundle is shared (a rented machine, a colleague), so it carries the images, captions and
metadata.jsonl files the dataset scan pairs up, and leaves out everything else a dataset
folder tends to hold (notes, tokens, private sub-folders). A link that leads out of the
dataset folder is never followed. Every file left out is listed with the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.core.dataset.scan import METADATA_FILE, DatasetError, ImageEntry, scan_class_images, scan_concept
from studio.core.files import sha256_file

if TYPE_CHECKING:
    from studio.core.config.schema import ConceptSection

MANIFEST_VERSION = 1
Progress = Callable[[str, int, int], None]  # (message, done, total)


@dataclass
class DatasetSelection:
    """The files of one dataset folder that a bundle carries, and those it leaves out."""

    name: str  # the folder's name inside the bundle's dataset/
    root: Path  # the folder on this machine
    files: list[Path] = field(default_factory=list)  # under root, in a stable order
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path relative to root, why)


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except OSError:
        return False


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def select_files(name: str, root: Path, entries: list[ImageEntry]) -> DatasetSelection:
    """The images of `entries` and the caption files they were paired with, all inside `root`."""
    selection = DatasetSelection(name, root)
    real_root = root.resolve()
    chosen: dict[Path, None] = {}
    seen: set[Path] = set()
    for entry in entries:
        image, caption = entry.path, entry.caption_path
        seen.update(p for p in (image, caption) if p is not None)
        if not _inside(image, real_root):
            selection.skipped.append((_rel(image, root), f"a link out of the dataset folder (to {image.resolve()}); "
                                      "not followed"))
            if caption is not None and caption.name != METADATA_FILE:
                selection.skipped.append((_rel(caption, root), "the caption of an image left out"))
            continue
        chosen.setdefault(image, None)
        if caption is None:
            continue
        if _inside(caption, real_root):
            chosen.setdefault(caption, None)
        else:
            selection.skipped.append((_rel(caption, root), "a link out of the dataset folder; not followed"))
    selection.files = list(chosen)
    selection.files.sort(key=lambda p: _rel(p, root))
    kept = set(selection.files) | seen
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:
            if (here / d).is_symlink() and not _inside(here / d, real_root):
                selection.skipped.append((_rel(here / d, root),
                                          "a link to a folder out of the dataset folder; not followed"))
        for file in sorted(n for n in names if not n.startswith(".")):
            if here / file not in kept:
                selection.skipped.append((_rel(here / file, root),
                                          "not an image, caption or metadata file the trainer reads"))
    selection.skipped = list(dict.fromkeys(selection.skipped))  # a shared metadata.jsonl is told once
    return selection


def select_concept(concept: ConceptSection, name: str, classes: bool = False) -> DatasetSelection:
    """What a bundle carries of a concept's image folder (or of its class-image folder)."""
    root = Path((concept.class_path or "") if classes else concept.path)
    if classes:
        entries = scan_class_images(concept)
    else:
        try:
            entries = scan_concept(concept)
        except DatasetError as exc:
            raise ValueError(str(exc)) from None
    return select_files(name, root, entries)


def build_manifest(selections: list[DatasetSelection], copy_to: Path | None = None,
                   progress: Progress | None = None) -> dict[str, Any]:
    """File list with sizes and SHA-256 of the selected files; copies them when `copy_to` is set."""
    listing = [(s, path) for s in selections for path in s.files]
    entries = []
    total = 0
    for done, (selection, path) in enumerate(listing, start=1):
        rel = f"{selection.name}/{path.relative_to(selection.root).as_posix()}"
        size = path.stat().st_size
        entries.append({"path": rel, "size": size, "sha256": sha256_file(path)})
        total += size
        if copy_to is not None:
            target = copy_to / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        if progress:
            progress(f"dataset {rel}", done, len(listing))
    skipped = [{"path": f"{s.name}/{rel}", "reason": why} for s in selections for rel, why in s.skipped]
    return {"version": MANIFEST_VERSION, "files": entries, "total_bytes": total, "skipped": skipped}
