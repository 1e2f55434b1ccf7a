"""Where an edit pair's control images are, in the three folder layouts people use, and which belongs to
which target. Only directory listings are read.

The layouts (`dataset.control_layout`):

- ``folder``: a ``control/`` folder beside the targets holding a file named as each target
  (``photo.png`` -> ``control/photo.png``, any image extension); more references in ``control_0/``,
  ``control_1/``… (or ``control1/``), read in that order.
- ``suffix``: ``photo_control.png`` beside ``photo.png``; more as ``photo_control_0.png``,
  ``photo_control_1.png``….
- ``separate``: folders outside the targets named in ``dataset.control_folders``. This is how the two
  trainers people move from read them, confirmed in their sources:
  ai-toolkit (ostris/ai-toolkit ``toolkit/config_modules.py``, ``toolkit/dataloader_mixins/control.py``)
  takes ``control_path`` (one folder or a list; the UI writes ``control_path_1``..``control_path_3``) and
  in each folder looks for the target's file name without extension plus ``.jpg .jpeg .png .webp``: one
  reference per folder. musubi-tuner (kohya-ss/musubi-tuner ``dataset/datasources.py``,
  ``docs/dataset_config.md``) takes one ``control_directory`` where a control is named as its target
  (``image1.png``) or numbered for several (``image1_0.png``, ``image1_1.png``, or ``image1_0000.png``),
  the plain name first, then by number.

In every control folder a file matches its target the musubi way: the same stem, or the stem plus
``_N``; so one rule reads both trainers' folders. With ``control_layout = "auto"`` and no folders named,
the layout a concept folder shows is read: control folders in it, ``name_control`` images, or control
folders beside it (``dataset/target/`` with ``dataset/control/``, ``dataset/control2/``: ai-toolkit
datasets as people keep them), in that order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.core.dataset.image_headers import is_image_name

LAYOUTS = ("folder", "suffix", "separate")
LAYOUT_NAMES = {"folder": "control/ folders beside the targets", "suffix": "name_control images beside the targets",
                "separate": "separate control folders (ai-toolkit control_path, musubi-tuner control_directory)"}

_CONTROL_FOLDER = re.compile(r"control(?:_?(\d+))?", re.IGNORECASE)
_CONTROL_SUFFIX = re.compile(r"(.+)_control(?:_(\d+))?", re.IGNORECASE)
_NUMBERED = re.compile(r"(.+)_(\d+)")


def control_folder_order(name: str) -> int | None:
    """Position of a folder named ``control`` (0), ``control_N`` or ``controlN`` (N + 1); None for other names."""
    match = _CONTROL_FOLDER.fullmatch(name)
    if match is None:
        return None
    return 0 if match.group(1) is None else int(match.group(1)) + 1


def suffix_target(stem: str) -> tuple[str, int] | None:
    """(target stem, position) of a ``name_control`` (0) or ``name_control_N`` (N + 1) file stem."""
    match = _CONTROL_SUFFIX.fullmatch(stem)
    if match is None:
        return None
    return match.group(1), 0 if match.group(2) is None else int(match.group(2)) + 1


def stem_target(stem: str, targets: set[str]) -> tuple[str, int] | None:
    """(target stem, position) of a file in a control folder: named as its target (0), or as its target
    plus ``_N`` (N + 1). `targets` and the result are lower case."""
    stem = stem.lower()
    if stem in targets:
        return stem, 0
    match = _NUMBERED.fullmatch(stem)
    if match is not None and match.group(1) in targets:
        return match.group(1), int(match.group(2)) + 1
    return None


@dataclass(frozen=True)
class ControlSettings:
    """How a dataset's control images are found: `layout` ("auto" or one of LAYOUTS) and, for "separate",
    the control folders (absolute)."""

    layout: str = "auto"
    folders: tuple[Path, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"layout": self.layout, "folders": [str(f) for f in self.folders]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ControlSettings:
        return cls(str(data.get("layout", "auto")), tuple(Path(f) for f in data.get("folders", ())))

    def for_concept(self, root: Path) -> ControlSettings:
        """The settings the concept folder `root` is read with: the layout set, else the one its files show
        (control folders inside it, name_control images, or control folders beside it); "folder" (where the
        studio looks first) when none shows."""
        if self.layout != "auto":
            return self
        if self.folders:
            return ControlSettings("separate", self.folders)
        found = detect_control_layout(root)
        if found is not None:
            return ControlSettings(found)
        siblings = sibling_control_folders(root)
        return ControlSettings("separate", siblings) if siblings else ControlSettings("folder")

    def skips_folder(self, root: Path, folder: Path) -> bool:
        """Whether `folder` (at or below the concept folder `root`) holds controls, not targets."""
        if self.layout == "folder":
            return any(control_folder_order(part) is not None for part in folder.relative_to(root).parts)
        if self.layout == "separate":
            return any(folder == f or f in folder.parents for f in self.folders)
        return False


def _listing(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return [e for e in it if not e.name.startswith(".")]


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def detect_control_layout(root: Path) -> str | None:
    """ "folder" when `root` has a ``control`` (``control_N``) folder, "suffix" when an image in it is named
    like ``name_control.png`` beside ``name.png``; None otherwise (or when `root` cannot be listed)."""
    try:
        items = _listing(root)
    except OSError:
        return None
    if any(control_folder_order(e.name) is not None and _is_dir(e) for e in items):
        return "folder"
    stems = {os.path.splitext(e.name)[0].lower() for e in items if is_image_name(e.name)}
    for stem in stems:
        found = suffix_target(stem)
        if found is not None and found[0] in stems:
            return "suffix"
    return None


def sibling_control_folders(root: Path) -> tuple[Path, ...]:
    """Folders beside `root` named ``control``, ``control_N`` or ``controlN`` holding an image named as one in
    `root`, in their order: the way ai-toolkit datasets are often kept (``dataset/target/``,
    ``dataset/control/``, ``dataset/control2/``)."""
    if control_folder_order(root.name) is not None:
        return ()
    try:
        stems = {os.path.splitext(e.name)[0].lower() for e in _listing(root) if is_image_name(e.name)}
        siblings = [(order, root.parent / e.name) for e in _listing(root.parent)
                    if (order := control_folder_order(e.name)) is not None and _is_dir(e)]
    except OSError:
        return ()
    found = []
    for _order, folder in sorted(siblings):
        try:
            if any(stem_target(image.stem, stems) for image in _images(folder)):
                found.append(folder)
        except OSError:
            continue
    return tuple(found)


@dataclass
class ControlMatch:
    """Controls found for a concept's targets."""

    controls: dict[Path, tuple[Path, ...]] = field(default_factory=dict)  # target -> its controls, in order
    orphans: list[Path] = field(default_factory=list)  # control images whose target does not exist
    missing_folders: list[Path] = field(default_factory=list)  # named control folders that do not exist
    unreadable_folders: list[tuple[Path, str]] = field(default_factory=list)


def _images(folder: Path) -> list[Path]:
    return sorted(folder / e.name for e in _listing(folder) if is_image_name(e.name) and not _is_dir(e))


def _collect(found: dict[tuple[Path, str], list[tuple[int, int, Path]]], match: ControlMatch,
             folder_rank: int, folder: Path, images: Sequence[Path], stems: set[str], key_folder: Path) -> None:
    """Match the images of one control folder to the targets (by stem) of `key_folder`."""
    for image in images:
        hit = stem_target(image.stem, stems)
        if hit is None:
            match.orphans.append(image)
        else:
            found.setdefault((key_folder, hit[0]), []).append((folder_rank, hit[1], image))


def match_controls(targets: Sequence[Path], root: Path, settings: ControlSettings) -> ControlMatch:
    """The control images of `targets` (images of the concept folder `root`), read with `settings` as
    `for_concept` gives them for `root`."""
    layout, match = settings.layout, ControlMatch()
    by_folder: dict[Path, set[str]] = {}
    for target in targets:
        by_folder.setdefault(target.parent, set()).add(target.stem.lower())
    found: dict[tuple[Path, str], list[tuple[int, int, Path]]] = {}
    if layout == "separate":
        everywhere = {stem for stems in by_folder.values() for stem in stems}
        for rank, folder in enumerate(settings.folders):
            if not folder.is_dir():
                match.missing_folders.append(folder)
                continue
            try:
                _collect(found, match, rank, folder, _images(folder), everywhere, root)
            except OSError as exc:
                match.unreadable_folders.append((folder, exc.strerror or str(exc)))
    for parent, stems in by_folder.items():
        try:
            items = _listing(parent) if layout != "separate" else []
        except OSError:
            continue  # the listing of targets already reported it
        if layout == "folder":
            for entry in items:
                order = control_folder_order(entry.name)
                if order is None or not _is_dir(entry):
                    continue
                try:
                    _collect(found, match, order, parent / entry.name, _images(parent / entry.name), stems, parent)
                except OSError as exc:
                    match.unreadable_folders.append((parent / entry.name, exc.strerror or str(exc)))
        elif layout == "suffix":
            for entry in items:
                hit = suffix_target(os.path.splitext(entry.name)[0]) if is_image_name(entry.name) else None
                if hit is None:
                    continue
                if hit[0].lower() in stems:
                    found.setdefault((parent, hit[0].lower()), []).append((0, hit[1], parent / entry.name))
                else:
                    match.orphans.append(parent / entry.name)
    for target in targets:
        key = (root if layout == "separate" else target.parent, target.stem.lower())
        if key in found:
            match.controls[target] = tuple(path for *_order, path in sorted(found[key]))
    match.orphans.sort()
    return match


def find_controls(root: Path) -> ControlSettings | None:
    """The control images' settings a folder of images shows by itself (control folders in or beside it,
    name_control images); None when it shows none: then it is not a folder of edit pairs."""
    found = ControlSettings().for_concept(root)
    if found.layout == "folder" and detect_control_layout(root) is None:
        return None
    return found
