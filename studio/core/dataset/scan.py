"""The dataset model: image folders scanned into entries that pair each image with its caption.

Scanning reads directory listings and caption files only, never pixels; image sizes come
from the file headers, on demand (`image_size`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.dataset.caption_tags import join_tags, split_tags

if TYPE_CHECKING:
    from studio.core.config.schema import ConceptSection, DatasetSection

__all__ = [
    "CAPTION_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "METADATA_FILE",
    "ConceptListing",
    "DatasetError",
    "ImageEntry",
    "ScanResult",
    "image_size",
    "join_tags",
    "kohya_folder",
    "list_concept",
    "read_caption_file",
    "read_captions",
    "rename_repeat_folder",
    "scan_class_images",
    "scan_concept",
    "scan_concept_report",
    "scan_dataset",
    "split_tags",
]

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})
CAPTION_EXTENSIONS = (".txt", ".caption")
METADATA_FILE = "metadata.jsonl"
# Image files people keep next to their training images that the trainer does not read.
OTHER_IMAGE_EXTENSIONS = frozenset({".gif", ".tif", ".tiff", ".heic", ".heif", ".avif", ".jxl", ".psd"})

_KOHYA = re.compile(r"^(\d+)_(.+)$")
_DIGITS = re.compile(r"(\d+)")
_UTF8_BOM = b"\xef\xbb\xbf"


class DatasetError(ValueError):
    """A dataset that cannot be read; the message names the folder and what to do."""


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

    @property
    def has_caption(self) -> bool:
        return bool(self.caption)


@dataclass
class ScanResult:
    """One concept folder scanned: its images and what else the scan noticed."""

    folder: Path
    entries: list[ImageEntry] = field(default_factory=list)
    orphan_captions: list[Path] = field(default_factory=list)  # caption files with no image
    other_images: list[Path] = field(default_factory=list)  # image formats the trainer skips
    metadata_errors: list[tuple[Path, int, str]] = field(default_factory=list)  # file, line, message
    empty_folders: list[Path] = field(default_factory=list)  # kohya "N_name" folders with no images
    repeat_folders: dict[Path, int] = field(default_factory=dict)  # kohya folder below the root -> its images
    unreadable_folders: list[tuple[Path, str]] = field(default_factory=list)  # folder, why it cannot be listed


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


def read_caption_file(path: Path) -> tuple[str, bool]:
    """The caption in `path` and whether it was valid UTF-8.

    A UTF-8 BOM is dropped, Windows line endings become "\\n" and the text is stripped.
    Files that are not UTF-8 are read as UTF-16 (with its BOM) or cp1252, then latin-1,
    and reported with False so the person can be warned; they are never rewritten here.
    """
    data = Path(path).read_bytes()
    was_utf8 = True
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        was_utf8 = False
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            text = data.decode("utf-16", errors="replace")
        else:
            try:
                text = data.decode("cp1252")
            except UnicodeDecodeError:
                text = data.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n").strip(), was_utf8


def image_size(path: Path) -> tuple[int, int] | None:
    """(width, height) as the image is shown (EXIF rotation applied), from the header; None if unreadable."""
    from PIL import Image  # Pillow is only needed once sizes are asked for

    try:
        with Image.open(path) as image:
            width, height = image.size
            try:
                orientation = image.getexif().get(0x0112, 1)
            except Exception:  # a broken EXIF block leaves the stored orientation
                orientation = 1
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    if orientation in (5, 6, 7, 8):
        return height, width
    return width, height


# ---------------------------------------------------------------- scanning


def _walk(root: Path, unreadable: list[tuple[Path, str]] | None = None
          ) -> Iterator[tuple[Path, list[os.DirEntry[str]]]]:
    """(folder, visible entries) for `root` and every visible subfolder; a symlinked folder is entered once.

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
                items = [e for e in it if not e.name.startswith(".")]
        except OSError as exc:
            if unreadable is not None:
                unreadable.append((folder, exc.strerror or str(exc)))
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


def _read_metadata(path: Path, result: ScanResult) -> dict[Path, str]:
    """Captions of a metadata.jsonl, keyed by absolute image path (`file_name` is relative to its folder)."""
    captions: dict[Path, str] = {}
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        result.metadata_errors.append((path, 0, f"cannot be read: {exc}"))
        return captions
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            result.metadata_errors.append((path, number, f"is not valid JSON ({exc.msg})"))
            continue
        if not isinstance(row, dict) or not isinstance(row.get("file_name"), str):
            result.metadata_errors.append((path, number, 'has no "file_name" string'))
            continue
        text = row.get("text", row.get("caption"))
        if not isinstance(text, str):
            result.metadata_errors.append((path, number, 'has no "text" string'))
            continue
        image = (path.parent / row["file_name"]).absolute()
        captions[Path(os.path.normpath(image))] = text.replace("\r\n", "\n").strip()
    return captions


def _natural_key(rel: str) -> tuple[tuple[str | int, ...], str]:
    """Sort key of a path relative to its concept folder: "img2" before "img10", case ignored."""
    parts: list[str | int] = list(_DIGITS.split(rel.lower()))
    # re.split with a group alternates text and digits, so every position compares like with like.
    parts[1::2] = [int(p) for p in parts[1::2]]
    return tuple(parts), rel


def _resolve_folder(path: str, base_dir: Path | None) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    return Path(os.path.normpath(folder.absolute()))


@dataclass
class _Folder:
    """What pairing an image of one folder with its caption needs to know about the folder."""

    path: Path
    names: set[str]
    by_lower: dict[str, str]
    folder_caption: str | None


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
    _pending: list[tuple[ImageEntry, str, _Folder]] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [entry.path for entry in self.result.entries]


def list_concept(concept: ConceptSection, base_dir: Path | None = None) -> ConceptListing:
    """Find and order the images of one concept folder; reads directory listings only.

    Raises DatasetError when the folder is missing or is a file.
    """
    root = _resolve_folder(concept.path, base_dir)
    if not root.exists():
        raise DatasetError(
            f"Image folder {root} does not exist. Check dataset.concepts path \"{concept.path}\" "
            "(relative paths start at the project folder) or create the folder and add images."
        )
    if not root.is_dir():
        raise DatasetError(f"{root} is a file, not a folder. Point the concept path at the folder holding the images.")
    listing = ConceptListing(concept, ScanResult(folder=root))
    result = listing.result
    root_kohya = kohya_folder(root.name)
    root_text = str(root)
    keyed: list[tuple[tuple[tuple[str | int, ...], str], ImageEntry, str, _Folder]] = []
    image_folders: list[Path] = []
    folders = list(_walk(root, result.unreadable_folders))
    if result.unreadable_folders and result.unreadable_folders[0][0] == root:
        raise DatasetError(f"Image folder {root} cannot be read ({result.unreadable_folders[0][1]}). Give your "
                           "user read access to it, or copy the images to a folder of yours.")
    for folder, items in folders:
        # The nearest kohya folder below the root decides repeats and the folder caption.
        repeats, folder_caption = 1, root_kohya[1] if root_kohya else None
        rel_parts = folder.relative_to(root).parts
        repeat_folder: Path | None = None
        for depth in range(len(rel_parts), 0, -1):
            parsed = kohya_folder(rel_parts[depth - 1])
            if parsed is not None:
                repeats, folder_caption = parsed
                repeat_folder = root.joinpath(*rel_parts[:depth])
                break
        rel_prefix = "".join(part + "/" for part in rel_parts)
        names = {i.name for i in items}
        info = _Folder(folder, names, {name.lower(): name for name in names}, folder_caption)
        if METADATA_FILE in names and concept.caption_source in ("auto", "metadata"):
            listing.metadata_files.append(folder / METADATA_FILE)
        image_stems: set[str] = set()
        before = len(keyed)
        caption_files: list[tuple[str, str]] = []  # (lowercase stem, name)
        for item in items:
            name = item.name
            dot = name.rfind(".")
            stem, ext = (name[:dot], name[dot:].lower()) if dot > 0 else (name, "")
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
            entry = ImageEntry(
                path=folder / name, caption=None, caption_path=None, caption_source="none",
                repeats=concept.repeats * repeats, concept=root_text,
            )
            keyed.append((_natural_key(rel_prefix + name), entry, stem, info))
        result.orphan_captions.extend(folder / name for stem, name in caption_files if stem not in image_stems)
        if image_stems:
            image_folders.append(folder)
            if repeat_folder is not None:
                images_here = len(keyed) - before
                result.repeat_folders[repeat_folder] = result.repeat_folders.get(repeat_folder, 0) + images_here
    for folder, _ in folders:
        if folder != root and kohya_folder(folder.name) is not None and not any(
            f == folder or folder in f.parents for f in image_folders
        ):
            result.empty_folders.append(folder)
    result.orphan_captions.sort()
    keyed.sort(key=lambda row: row[0])
    result.entries = [row[1] for row in keyed]
    listing._pending = [(entry, stem, info) for _, entry, stem, info in keyed]
    return listing


def read_captions(listing: ConceptListing) -> ScanResult:
    """Pair every listed image with its caption (sidecar, metadata.jsonl, folder name or prompt)."""
    result, concept = listing.result, listing.concept
    metadata: dict[Path, str] = {}
    metadata_file: dict[Path, Path] = {}
    for path in listing.metadata_files:
        found = _read_metadata(path, result)
        metadata.update(found)
        metadata_file.update(dict.fromkeys(found, path))
    for entry, stem, info in listing._pending:
        _pair_caption(entry, stem, info, concept.caption_source, metadata, metadata_file)
        if entry.caption_source == "none" and concept.instance_prompt:
            entry.caption, entry.caption_source = concept.instance_prompt, "prompt"
    listing._pending = []
    return result


def scan_concept_report(concept: ConceptSection, base_dir: Path | None = None) -> ScanResult:
    """Scan one concept folder and report orphan captions, skipped formats and metadata errors too."""
    return read_captions(list_concept(concept, base_dir))


def _pair_caption(
    entry: ImageEntry,
    stem: str,
    folder: _Folder,
    source: str,
    metadata: dict[Path, str],
    metadata_file: dict[Path, Path],
) -> None:
    for ext, kind in ((".txt", "txt"), (".caption", "caption")):
        if source not in ("auto", kind):
            continue
        name = stem + ext
        actual = name if name in folder.names else folder.by_lower.get(name.lower())
        if actual is None:
            continue
        path = folder.path / actual
        entry.caption_path, entry.caption_source = path, kind
        try:
            entry.caption, entry.caption_utf8 = read_caption_file(path)
        except OSError as exc:
            # Unreadable, not missing: the check and the trainer say so rather than train it uncaptioned.
            entry.caption_error = exc.strerror or str(exc)
        return
    if source in ("auto", "metadata") and entry.path in metadata:
        entry.caption = metadata[entry.path]
        entry.caption_path, entry.caption_source = metadata_file[entry.path], "metadata"
        return
    if source in ("auto", "folder") and folder.folder_caption:
        entry.caption, entry.caption_source = folder.folder_caption, "folder"


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
    folder = _resolve_folder(concept.class_path, base_dir)
    if not folder.is_dir():
        return []  # missing class images are generated before training
    entries = []
    for walked, items in _walk(folder):
        for item in items:
            if os.path.splitext(item.name)[1].lower() in IMAGE_EXTENSIONS and item.is_file():
                entries.append(ImageEntry(
                    path=walked / item.name, caption=concept.class_prompt, caption_path=None,
                    caption_source="prompt", repeats=1, concept=str(folder), is_class=True,
                ))
    entries.sort(key=lambda e: _natural_key(e.path.relative_to(folder).as_posix()))
    return entries


def scan_dataset(dataset: DatasetSection, base_dir: Path | None = None) -> list[ImageEntry]:
    """Every instance image of every concept of a config's dataset section."""
    entries: list[ImageEntry] = []
    for concept in dataset.concepts:
        entries.extend(scan_concept(concept, base_dir))
    return entries
