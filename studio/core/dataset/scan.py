"""The dataset model: a concept's folder scanned into entries that pair each image with its caption.

Scanning reads directory listings and caption files only, never pixels. Folder layouts
live in `layouts`, caption sources in `caption_sources`, image sizes in `image_headers`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.dataset.captions.caption_sources import (
    CAPTION_EXTENSIONS,
    METADATA_FILE,
    FolderCaptions,
    MetadataProblem,
    find_caption,
    read_metadata,
)
from studio.core.dataset.edit_pairs.controls import ControlSettings, match_controls, suffix_target
from studio.core.dataset.image_headers import IMAGE_EXTENSIONS, OTHER_IMAGE_EXTENSIONS, is_image_name
from studio.core.dataset.layouts import DatasetError, kohya_folder, natural_key, resolve_folder, walk_folders

if TYPE_CHECKING:
    from studio.core.config.schema import ConceptSection, DatasetSection

__all__ = [
    "ConceptListing",
    "DatasetError",
    "ImageEntry",
    "ScanResult",
    "list_concept",
    "read_captions",
    "scan_class_images",
    "scan_concept",
    "scan_concept_report",
    "scan_dataset",
]


@dataclass
class ImageEntry:
    path: Path  # absolute image path
    caption: str | None  # caption text (BOM stripped, CRLF normalised, stripped); None when none
    caption_path: Path | None  # sidecar or metadata.jsonl it came from; None for folder/prompt/none
    caption_source: str  # "txt" | "caption" | "metadata" | "folder" | "prompt" | "none"
    repeats: int  # concept repeats times the kohya "N_name" folder's N
    concept: str  # concept folder path
    caption_utf8: bool = True  # False when the caption file was not valid UTF-8 (read with a fallback)
    is_class: bool = False  # DreamBooth class (regularisation) image
    caption_error: str | None = None  # why the caption file (caption_path) cannot be read
    controls: tuple[Path, ...] = ()  # an edit pair's control (reference) images, in order; () for a plain image

@dataclass
class ScanResult:
    """One concept folder scanned: its images and what else the scan noticed."""

    folder: Path
    entries: list[ImageEntry] = field(default_factory=list)
    orphan_captions: list[Path] = field(default_factory=list)  # caption files with no image
    other_images: list[Path] = field(default_factory=list)  # image formats the trainer skips
    metadata_errors: list[MetadataProblem] = field(default_factory=list)
    empty_folders: list[Path] = field(default_factory=list)  # kohya "N_name" folders with no images
    repeat_folders: dict[Path, int] = field(default_factory=dict)  # kohya folder below the root -> its images
    unreadable_folders: list[tuple[Path, str]] = field(default_factory=list)  # folder, why it cannot be listed
    # Edit pairs (dataset.kind = "edit"): the layout read, controls without a target, named folders not there.
    control_layout: str | None = None
    control_folders: tuple[Path, ...] = ()  # with control_layout "separate": the folders read
    orphan_controls: list[Path] = field(default_factory=list)
    missing_control_folders: list[Path] = field(default_factory=list)


_Keyed = tuple[tuple[tuple[str | int, ...], str], ImageEntry, str, FolderCaptions]  # sort key, entry, stem, folder


@dataclass
class ConceptListing:
    """A concept folder listed (images found and ordered) but no caption read yet.

    `paths` is all a grid needs to show names and thumbnails; `read_captions` turns the
    listing into the full ScanResult. The two steps let the studio paint before reading
    thousands of caption files.
    """

    concept: ConceptSection
    result: ScanResult
    metadata_files: list[Path] = field(default_factory=list)
    _pending: list[tuple[ImageEntry, str, FolderCaptions]] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [entry.path for entry in self.result.entries]


def _concept_root(concept: ConceptSection, base_dir: Path | None) -> Path:
    root = resolve_folder(concept.path, base_dir)
    if not root.exists():
        raise DatasetError(
            f"Image folder {root} does not exist. Check dataset.concepts path \"{concept.path}\" "
            "(relative paths start at the project folder) or create the folder and add images."
        )
    if not root.is_dir():
        raise DatasetError(f"{root} is a file, not a folder. Point the concept path at the folder holding the images.")
    return root


def _nearest_repeat_folder(root: Path, folder: Path) -> tuple[int, str | None, Path | None]:
    """(repeats, folder caption, kohya folder) from the nearest kohya "N_name" folder at or above `folder`.

    The concept folder itself lends its name as a caption but not its N: the concept's
    own `repeats` stands for it.
    """
    rel_parts = folder.relative_to(root).parts
    for depth in range(len(rel_parts), 0, -1):
        parsed = kohya_folder(rel_parts[depth - 1])
        if parsed is not None:
            return parsed[0], parsed[1], root.joinpath(*rel_parts[:depth])
    root_kohya = kohya_folder(root.name)
    return 1, root_kohya[1] if root_kohya else None, None


def _list_folder(
    listing: ConceptListing, root: Path, folder: Path, items: list[os.DirEntry[str]], keyed: list[_Keyed],
    skip_controls: bool = False,
) -> int:
    """Add the images of one folder to `keyed`; note its orphan captions and skipped formats. Returns the images."""
    concept, result = listing.concept, listing.result
    repeats, folder_caption, repeat_folder = _nearest_repeat_folder(root, folder)
    rel_prefix = "".join(part + "/" for part in folder.relative_to(root).parts)
    names = {i.name for i in items}
    info = FolderCaptions(folder, names, {name.lower(): name for name in names}, folder_caption)
    if METADATA_FILE in names and concept.caption_source in ("auto", "metadata"):
        listing.metadata_files.append(folder / METADATA_FILE)
    image_stems: set[str] = set()
    before = len(keyed)
    caption_files: list[tuple[str, str]] = []  # (lowercase stem, name)
    for item in items:
        name = item.name
        dot = name.rfind(".")
        stem, ext = (name[:dot], name[dot:].lower()) if dot > 0 else (name, "")
        if skip_controls and ext in IMAGE_EXTENSIONS and suffix_target(stem) is not None:
            continue  # a name_control image is an edit pair's control, not a training image
        if ext not in IMAGE_EXTENSIONS:
            if ext in CAPTION_EXTENSIONS:
                caption_files.append((stem.lower(), name))
            elif ext in OTHER_IMAGE_EXTENSIONS:
                result.other_images.append(folder / name)
            continue
        try:
            if not item.is_file(follow_symlinks=True):
                continue
        except OSError:
            continue
        image_stems.add(stem.lower())
        entry = ImageEntry(path=folder / name, caption=None, caption_path=None, caption_source="none",
                           repeats=concept.repeats * repeats, concept=str(root))
        keyed.append((natural_key(rel_prefix + name), entry, stem, info))
    result.orphan_captions.extend(folder / name for stem, name in caption_files if stem not in image_stems)
    found = len(keyed) - before
    if found and repeat_folder is not None:
        result.repeat_folders[repeat_folder] = result.repeat_folders.get(repeat_folder, 0) + found
    return found


def list_concept(concept: ConceptSection, base_dir: Path | None = None,
                 controls: ControlSettings | None = None) -> ConceptListing:
    """Find and order the images of one concept folder; reads directory listings only.

    With `controls` (dataset.kind = "edit") the images are targets: control images are left out and
    each target gets its controls. Raises DatasetError when the folder is missing or is a file.
    """
    root = _concept_root(concept, base_dir)
    listing = ConceptListing(concept, ScanResult(folder=root))
    result = listing.result
    keyed: list[_Keyed] = []
    image_folders: list[Path] = []
    folders = list(walk_folders(root, result.unreadable_folders))
    if result.unreadable_folders and result.unreadable_folders[0][0] == root:
        raise DatasetError(f"Image folder {root} cannot be read ({result.unreadable_folders[0][1]}). Give your "
                           "user read access to it, or copy the images to a folder of yours.")
    concept_controls = controls.for_concept(root) if controls is not None else None
    if concept_controls is not None:
        folders = [(f, items) for f, items in folders if not concept_controls.skips_folder(root, f)]
    for folder, items in folders:
        if _list_folder(listing, root, folder, items, keyed,
                        concept_controls is not None and concept_controls.layout == "suffix"):
            image_folders.append(folder)
    for folder, _ in folders:
        if folder != root and kohya_folder(folder.name) is not None and not any(
            f == folder or folder in f.parents for f in image_folders
        ):
            result.empty_folders.append(folder)
    result.orphan_captions.sort()
    keyed.sort(key=lambda row: row[0])
    result.entries = [row[1] for row in keyed]
    listing._pending = [(entry, stem, info) for _, entry, stem, info in keyed]
    if concept_controls is not None:
        _pair(result, root, concept_controls)
    return listing


def _pair(result: ScanResult, root: Path, controls: ControlSettings) -> None:
    """Give each target its control images; note the controls without a target."""
    found = match_controls([e.path for e in result.entries], root, controls)
    for entry in result.entries:
        entry.controls = found.controls.get(entry.path, ())
    result.control_layout, result.control_folders = controls.layout, controls.folders
    result.orphan_controls = found.orphans
    result.missing_control_folders = found.missing_folders
    result.unreadable_folders.extend(found.unreadable_folders)


def read_captions(listing: ConceptListing) -> ScanResult:
    """Pair every listed image with its caption (sidecar, metadata.jsonl, folder name or prompt)."""
    result, concept = listing.result, listing.concept
    metadata: dict[Path, tuple[str, Path]] = {}
    for path in listing.metadata_files:
        captions, problems = read_metadata(path)
        result.metadata_errors.extend(problems)
        metadata.update((image, (text, path)) for image, text in captions.items())
    for entry, stem, info in listing._pending:
        found = find_caption(entry.path, stem, info, concept.caption_source, metadata)
        if found is not None and found.error is not None:
            entry.caption_source, entry.caption_path, entry.caption_error = found.source, found.path, found.error
        elif found is not None:
            entry.caption, entry.caption_source, entry.caption_path = found.text, found.source, found.path
            entry.caption_utf8 = found.utf8
        elif concept.instance_prompt:
            entry.caption, entry.caption_source = concept.instance_prompt, "prompt"
    listing._pending = []
    return result


def scan_concept_report(concept: ConceptSection, base_dir: Path | None = None,
                        controls: ControlSettings | None = None) -> ScanResult:
    """Scan one concept folder and report orphan captions, skipped formats and metadata errors too
    (with `controls`, as edit pairs: see list_concept)."""
    return read_captions(list_concept(concept, base_dir, controls))


def scan_concept(concept: ConceptSection, base_dir: Path | None = None) -> list[ImageEntry]:
    """The images of one concept with their captions, in natural file order.

    `caption_source` "auto" tries a .txt sidecar, a .caption sidecar, metadata.jsonl, the
    kohya "N_name" folder name, then the concept's instance prompt. Kohya folders inside
    the concept multiply its repeats by N. Raises DatasetError when the folder is missing.
    """
    return scan_concept_report(concept, base_dir).entries


def scan_class_images(concept: ConceptSection, base_dir: Path | None = None) -> list[ImageEntry]:
    """DreamBooth class images of a concept (captioned with its class prompt); [] when it has none."""
    if not concept.class_path:
        return []
    folder = resolve_folder(concept.class_path, base_dir)
    if not folder.is_dir():
        return []  # missing class images are generated before training
    entries = []
    for walked, items in walk_folders(folder):
        for item in items:
            if is_image_name(item.name) and item.is_file():
                entries.append(ImageEntry(
                    path=walked / item.name, caption=concept.class_prompt, caption_path=None,
                    caption_source="prompt", repeats=1, concept=str(folder), is_class=True,
                ))
    entries.sort(key=lambda e: natural_key(e.path.relative_to(folder).as_posix()))
    return entries


def scan_dataset(dataset: DatasetSection, base_dir: Path | None = None) -> list[ImageEntry]:
    """Every instance image of every concept of a config's dataset section."""
    entries: list[ImageEntry] = []
    for concept in dataset.concepts:
        entries.extend(scan_concept(concept, base_dir))
    return entries
