"""Where an image's caption comes from: a `.txt`/`.caption` sidecar, a `metadata.jsonl`, or its folder's name.

Reading is forgiving (a BOM, Windows line endings, files that are not UTF-8) and never
rewrites a person's file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from studio.core.config.schema import CAPTION_EXTENSIONS as CAPTION_EXTENSIONS  # the sidecars read

METADATA_FILE = "metadata.jsonl"

_UTF8_BOM = b"\xef\xbb\xbf"

MetadataProblem = tuple[Path, int, str]  # file, line (0: the whole file), what is wrong
# A JSON line ends at a newline only: a string may hold U+2028, U+2029 or U+0085 as they are, which
# str.splitlines() would also split at. (A raw carriage return cannot be inside a JSON string.)
_LINE_END = re.compile(r"\r\n|\r|\n")


def read_caption_file(path: Path) -> tuple[str, bool]:
    """The caption in `path` and whether it was valid UTF-8.

    A UTF-8 BOM is dropped, Windows line endings become "\\n" and the text is stripped.
    Files that are not UTF-8 are read as UTF-16 (with its BOM) or cp1252, then latin-1,
    and reported with False so the person can be warned; they are never rewritten here.
    """
    return decode_caption(Path(path).read_bytes())


def decode_caption(data: bytes) -> tuple[str, bool]:
    """A caption file's bytes as its text (see `read_caption_file`) and whether they were UTF-8."""
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


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSON-lines text (see `_LINE_END`), without their line ends."""
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def read_metadata(path: Path) -> tuple[dict[Path, str], list[MetadataProblem]]:
    """Captions of a metadata.jsonl keyed by absolute image path (`file_name` is relative to its folder),
    and the lines that could not be used."""
    captions: dict[Path, str] = {}
    problems: list[MetadataProblem] = []
    try:
        lines = jsonl_lines(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as exc:
        return captions, [(path, 0, f"cannot be read: {exc}")]
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append((path, number, f"is not valid JSON ({exc.msg})"))
            continue
        if not isinstance(row, dict) or not isinstance(row.get("file_name"), str):
            problems.append((path, number, 'has no "file_name" string'))
            continue
        text = row.get("text", row.get("caption"))
        if not isinstance(text, str):
            problems.append((path, number, 'has no "text" string'))
            continue
        image = (path.parent / row["file_name"]).absolute()
        captions[Path(os.path.normpath(image))] = text.replace("\r\n", "\n").strip()
    return captions, problems


@dataclass
class FolderCaptions:
    """What pairing an image of one folder with its caption needs to know about the folder."""

    path: Path
    names: set[str]
    by_lower: dict[str, str]
    folder_caption: str | None  # the name of the nearest kohya "N_name" folder


@dataclass(frozen=True)
class FoundCaption:
    text: str
    source: str  # "txt" | "caption" | "metadata" | "folder"
    path: Path | None = None  # the sidecar or metadata.jsonl it came from
    utf8: bool = True
    error: str | None = None  # why the sidecar `path` cannot be read (then `text` is empty)


def find_caption(
    image: Path, stem: str, folder: FolderCaptions, source: str, metadata: dict[Path, tuple[str, Path]]
) -> FoundCaption | None:
    """The caption of `image` from the first source `source` allows that has one ("auto": all, in order)."""
    for ext, kind in ((".txt", "txt"), (".caption", "caption")):
        if source not in ("auto", kind):
            continue
        name = stem + ext
        actual = name if name in folder.names else folder.by_lower.get(name.lower())
        if actual is None:
            continue
        path = folder.path / actual
        try:
            text, utf8 = read_caption_file(path)
        except OSError as exc:
            # Unreadable, not missing: the check and the trainer say so rather than train it uncaptioned.
            return FoundCaption("", kind, path, error=exc.strerror or str(exc))
        return FoundCaption(text, kind, path, utf8)
    if source in ("auto", "metadata") and image in metadata:
        text, path = metadata[image]
        return FoundCaption(text, "metadata", path)
    if source in ("auto", "folder") and folder.folder_caption:
        return FoundCaption(folder.folder_caption, "folder")
    return None
