"""How people lay out image folders, and walking them.

Four layouts are common: images directly in a folder; kohya's `N_name` subfolders (N is
how often each image repeats per epoch, the name is a caption); plain subfolders, one per
subject; and the diffusers imagefolder with a `metadata.jsonl`. A folder of edit pairs (a
`control/` folder or `name_control.png` files beside the targets, see `edit_pairs.controls`)
is one concept of targets; its control images are not counted. `detect_layout` tells
them apart from directory listings alone, so a folder of 10,000 images is read in
well under a second.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from studio.core.dataset.captions.caption_sources import METADATA_FILE
from studio.core.dataset.edit_pairs.controls import (
    LAYOUT_NAMES,
    ControlSettings,
    find_controls,
    suffix_target,
)
from studio.core.dataset.image_headers import is_image_name
from studio.core.text import plural

# A studio run folder (it holds the run's event log) is never read as training images,
# so a project kept inside its image folder does not train on its own samples.
RUN_MARKER = "events.jsonl"
# An export bundle (bundle.json beside its dataset/ copy, in the project's exports/ by default) is not either: in a
# project kept in its image folder, the next run trained each image twice, and the next export copied the copy.
BUNDLE_MARKER = "bundle.json"

# A subfolder by one of these names whose images are named as the training images holds loss masks
# (dataset.mask_folder), not a concept: `img/` and `masks/` side by side.
MASK_FOLDER_NAMES = ("masks", "mask")
# Folders that file servers and archivers fill with files of their own: a Synology NAS keeps thumbnails of every
# picture in @eaDir/ (photo.jpg/SYNOPHOTO_THUMB_XL.jpg and more), a zip made on a Mac holds __MACOSX/. Like hidden
# names (.DS_Store, ._photo.jpg), they are never read as the person's images.
SYSTEM_FOLDERS = frozenset({"@eaDir", "__MACOSX"})
_KOHYA = re.compile(r"^(\d+)_(.+)$")
_DIGITS = re.compile(r"(\d+)")


class DatasetError(ValueError):
    """A dataset that cannot be read; the message names the folder and what to do."""


def kohya_folder(name: str) -> tuple[int, str] | None:
    """(N, name) for a kohya repeat folder named "N_name", else None."""
    match = _KOHYA.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2).replace("_", " ").strip()


def rename_repeat_folder(folder: Path, repeats: int) -> Path:
    """Rename a kohya "N_name" folder to "repeats_name"; returns the new path.

    Raises DatasetError naming both folders when the target exists or the rename fails.
    """
    if kohya_folder(folder.name) is None:
        raise DatasetError(f"{folder} is not a kohya repeat folder (named like 10_name); its repeats are not in its name.")
    target = folder.with_name(f"{repeats}_{folder.name.split('_', 1)[1]}")
    if target == folder:
        return folder
    if target.exists():
        raise DatasetError(f"Cannot rename {folder.name} to {target.name}: that folder already exists. "
                           "Merge or rename one of them first.")
    try:
        folder.rename(target)
    except OSError as exc:
        raise DatasetError(f"Cannot rename {folder} to {target.name}: {exc.strerror}. "
                           "Check that the folder is writable and no other program has it open.") from exc
    return target


def is_listed(name: str) -> bool:
    """Whether a name in an image folder is the person's: not hidden, not a system folder (SYSTEM_FOLDERS)."""
    return not name.startswith(".") and name not in SYSTEM_FOLDERS


def walk_folders(root: Path, unreadable: list[tuple[Path, str]] | None = None
                 ) -> Iterator[tuple[Path, list[os.DirEntry[str]]]]:
    """(folder, listed entries: see `is_listed`) for `root` and every listed subfolder, parents first.

    A symlinked folder is entered once; a studio run folder or export bundle below the root is skipped.
    Folders that cannot be listed are skipped and added to `unreadable` with the reason.
    """
    seen: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            st = folder.stat()
        except OSError as exc:
            if unreadable is not None:
                unreadable.append((folder, exc.strerror or str(exc)))
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            continue
        seen.add(key)
        try:
            with os.scandir(folder) as it:
                items = [e for e in it if is_listed(e.name)]
        except OSError as exc:
            if unreadable is not None:
                unreadable.append((folder, exc.strerror or str(exc)))
            continue
        if folder != root and any(item.name in (RUN_MARKER, BUNDLE_MARKER) for item in items):
            continue
        yield folder, items
        subdirs = []
        for item in items:
            try:
                if item.is_dir(follow_symlinks=True):
                    subdirs.append(Path(item.path))
            except OSError:
                continue
        stack.extend(sorted(subdirs, reverse=True))


def natural_key(rel: str) -> tuple[tuple[str | int, ...], str]:
    """Sort key of a path relative to its concept folder: "img2" before "img10", case ignored."""
    parts: list[str | int] = list(_DIGITS.split(rel.lower()))
    # re.split with a group alternates text and digits, so every position compares like with like.
    parts[1::2] = [int(p) for p in parts[1::2]]
    return tuple(parts), rel


def resolve_folder(path: str, base_dir: Path | None) -> Path:
    """A concept path made absolute (relative paths start at `base_dir`) and normalised."""
    folder = Path(path).expanduser()
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    return Path(os.path.normpath(folder.absolute()))


# ---------------------------------------------------------------- detection


@dataclass(frozen=True)
class FoundConcept:
    """A folder of images that becomes one concept of a project."""

    folder: Path
    images: int
    repeats: int = 1


@dataclass(frozen=True)
class DatasetLayout:
    root: Path
    kind: str  # "flat" | "kohya" | "nested" | "metadata" | "edit" | "empty"
    concepts: tuple[FoundConcept, ...]
    control_layout: str | None = None  # with kind "edit": "folder", "suffix" or "separate" (control folders beside it)
    mask_folder: Path | None = None  # a masks/ subfolder beside the concepts (MASK_FOLDER_NAMES)

    @property
    def images(self) -> int:
        return sum(c.images for c in self.concepts)

    def describe(self) -> str:
        """One line for a person: the layout, the concepts and their images."""
        if self.kind == "empty":
            return f"No images in {self.root} yet (.jpg, .jpeg, .png, .webp or .bmp)"
        kinds = {"flat": "images in the folder", "kohya": "kohya N_name folders",
                 "nested": "one subfolder per concept", "metadata": f"a {METADATA_FILE} of captions",
                 "edit": f"edit pairs with {LAYOUT_NAMES.get(self.control_layout or '', 'control images')}"}
        # The folder itself as the one concept needs no naming ("(.: 7)" said nothing a person could read).
        parts = [f"{_rel(c.folder, self.root)}: {c.images}" + (f" ×{c.repeats}" if c.repeats != 1 else "")
                 for c in self.concepts if c.folder != self.root or c.repeats != 1]
        noun = "concept" if len(self.concepts) == 1 else "concepts"
        listed = f" ({', '.join(parts)})" if parts else ""
        masks = f"; loss masks in {_rel(self.mask_folder, self.root)}" if self.mask_folder else ""
        return f"{kinds[self.kind]}: {len(self.concepts)} {noun}, {plural(self.images, 'image')}{listed}{masks}"


def _rel(folder: Path, root: Path) -> str:
    return "." if folder == root else folder.relative_to(root).as_posix()


def count_images(folder: Path, controls: ControlSettings | None = None) -> int:
    """The images in `folder` and its subfolders (what a concept on it would train on); with `controls`
    (as `ControlSettings.for_concept` gives them), the edit pairs' targets only."""
    return sum(1 for walked, items in walk_folders(folder)
               if controls is None or not controls.skips_folder(folder, walked)
               for item in items if is_image_name(item.name)
               and not (controls is not None and controls.layout == "suffix"
                        and suffix_target(item.name.rsplit(".", 1)[0]) is not None))


def detect_layout(root: Path) -> DatasetLayout:
    """Which layout the image folder `root` has, and the concepts it makes.

    Images directly in `root` or a metadata.jsonl make `root` one concept (kohya folders
    inside it still repeat their images); otherwise each subfolder holding images is a
    concept, with N repeats when it is named like kohya's `N_name`.
    """
    root = Path(os.path.normpath(Path(root).expanduser().absolute()))
    try:
        with os.scandir(root) as it:
            items = [e for e in it if is_listed(e.name)]
    except OSError as exc:
        raise DatasetError(f"Cannot read the image folder {root}: {exc.strerror or exc}. "
                           "Check that it exists and that you may read it.") from None
    names = {item.name for item in items}
    if any(is_image_name(n) for n in names) and (found := find_controls(root)) is not None:
        return DatasetLayout(root, "edit", (FoundConcept(root, count_images(root, found)),), found.layout)
    if METADATA_FILE in names or any(is_image_name(n) for n in names):
        kind = "metadata" if METADATA_FILE in names else "flat"
        return DatasetLayout(root, kind, (FoundConcept(root, count_images(root)),))
    concepts: list[FoundConcept] = []
    control_layouts: set[str] = set()
    control_folders: set[Path] = set()
    for item in sorted(items, key=lambda e: natural_key(e.name)):
        try:
            if not item.is_dir(follow_symlinks=True):
                continue
        except OSError:
            continue
        folder = Path(item.path)
        found = find_controls(folder)
        images = count_images(folder, found)
        if found is not None:
            control_layouts.add(found.layout)
            control_folders.update(found.folders)
        if images:
            kohya = kohya_folder(item.name)
            concepts.append(FoundConcept(folder, images, kohya[0] if kohya else 1))
    # Control folders beside their targets (dataset/target/, dataset/control/) are not concepts of their own,
    # nor is a masks/ folder beside the images (the loss masks).
    concepts = [c for c in concepts if c.folder not in control_folders]
    masks = None if control_layouts else _mask_folder(concepts)
    concepts = [c for c in concepts if c.folder != masks]
    if not concepts:
        return DatasetLayout(root, "empty", ())
    if control_layouts:
        return DatasetLayout(root, "edit", tuple(concepts), min(control_layouts))
    kind = "kohya" if any(kohya_folder(c.folder.name) for c in concepts) else "nested"
    return DatasetLayout(root, kind, tuple(concepts), mask_folder=masks)


def _image_stems(folder: Path) -> set[str]:
    return {Path(item.name).stem for _folder, items in walk_folders(folder) for item in items
            if is_image_name(item.name)}


def _mask_folder(concepts: list[FoundConcept]) -> Path | None:
    """The subfolder among `concepts` that holds the others' loss masks: named masks/ (MASK_FOLDER_NAMES),
    with at least one image named as a training image."""
    for candidate in concepts:
        if candidate.folder.name.lower() not in MASK_FOLDER_NAMES:
            continue
        others = [c for c in concepts if c is not candidate]
        trained = set().union(*(_image_stems(c.folder) for c in others)) if others else set()
        if trained & _image_stems(candidate.folder):
            return candidate.folder
    return None
