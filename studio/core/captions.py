"""The caption store: edits kept in memory, saved atomically, never over a change made elsewhere.

A caption is saved back in the format it came from: a .txt/.caption sidecar, or its row
of metadata.jsonl (other keys and rows kept). An image whose caption came from a folder
name, a prompt or nowhere gets a new sidecar with the dataset's caption extension.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.dataset import METADATA_FILE, ImageEntry, read_caption_file


@dataclass(frozen=True)
class CaptionEdit:
    """One caption changed from `before` to `after`; a list of them is one undoable step."""

    image: Path
    before: str | None
    after: str | None

    def inverse(self) -> CaptionEdit:
        return CaptionEdit(self.image, self.after, self.before)


@dataclass
class CaptionConflict:
    """A caption file changed on disk since it was read; the person chooses which text to keep."""

    image: Path
    file: Path
    disk_text: str | None  # None when the file was deleted
    our_text: str

    def describe(self) -> str:
        return (f"{self.file} was changed by another program since the studio read it. "
                "Keep your text (overwrite the file) or take the text on disk.")


class CaptionSaveError(Exception):
    """A caption could not be written; the message says where and what to do."""

    def __init__(self, image: Path, file: Path, reason: str) -> None:
        self.image, self.file = image, file
        super().__init__(
            f"Cannot save the caption of {image.name} to {file}: {reason}. "
            "Your text is kept in the studio; make the folder writable or copy the dataset to a folder you can write to."
        )


@dataclass
class SaveReport:
    saved: list[Path] = field(default_factory=list)  # images whose caption is now on disk
    conflicts: list[CaptionConflict] = field(default_factory=list)
    errors: list[CaptionSaveError] = field(default_factory=list)


def write_texts_atomically(texts: Mapping[Path, str]) -> dict[Path, OSError]:
    """Write every file through a temporary file in its folder, made durable before the rename.

    Many files are synced at once (one sync for the batch on Linux) so saving thousands of
    captions stays fast; a crash leaves each file either old or new, never half written.
    """
    failed: dict[Path, OSError] = {}
    temps: list[tuple[str, Path]] = []
    batch_sync = sys.platform.startswith("linux") and len(texts) > 8
    for path, text in texts.items():
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        except OSError as exc:
            failed[path] = exc
            continue
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("utf-8"))
                if not batch_sync:
                    handle.flush()
                    os.fsync(handle.fileno())
            if path.exists():
                os.chmod(tmp, path.stat().st_mode & 0o7777)
            temps.append((tmp, path))
        except OSError as exc:
            failed[path] = exc
            _unlink(tmp)
    if batch_sync and temps:
        os.sync()  # Linux's sync() waits until every written page is on disk
    for tmp, path in temps:
        try:
            os.replace(tmp, path)
        except OSError as exc:
            failed[path] = exc
            _unlink(tmp)
    return failed


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _read_text_or_none(path: Path) -> str | None:
    try:
        return read_caption_file(path)[0]
    except FileNotFoundError:
        return None


class CaptionStore:
    """Captions of a scanned dataset, with unsaved edits and what is known to be on disk."""

    def __init__(self, entries: Iterable[ImageEntry], caption_extension: str = ".txt") -> None:
        self.caption_extension = caption_extension if caption_extension.startswith(".") else "." + caption_extension
        self.entries: dict[Path, ImageEntry] = {e.path: e for e in entries}
        # The text believed to be in each image's caption file (None: no file of ours yet).
        self._disk: dict[Path, str | None] = {
            p: (e.caption if e.caption_path is not None else None) for p, e in self.entries.items()
        }
        self._dirty: set[Path] = set()
        # Sidecars the studio made; undoing back to the scanned caption removes them again.
        self._created: set[Path] = set()
        self._original = {p: (e.caption, e.caption_source) for p, e in self.entries.items()}

    # ------------------------------------------------------------ reading and editing

    def caption(self, image: Path) -> str | None:
        return self.entries[image].caption

    def captions(self, images: Iterable[Path] | None = None) -> dict[Path, str | None]:
        keys = self.entries if images is None else images
        return {p: self.entries[p].caption for p in keys}

    def set_caption(self, image: Path, text: str | None) -> None:
        """Change a caption in memory; it is written by the next `flush`."""
        entry = self.entries[image]
        if entry.caption == text:
            return
        entry.caption = text
        self._dirty.add(image)

    def apply(self, edits: Iterable[CaptionEdit]) -> None:
        for edit in edits:
            self.set_caption(edit.image, edit.after)

    def revert(self, edits: Iterable[CaptionEdit]) -> None:
        for edit in reversed(list(edits)):
            self.set_caption(edit.image, edit.before)

    @property
    def pending(self) -> list[Path]:
        return sorted(self._dirty)

    def write_refusal(self, image: Path) -> str | None:
        """Why this image's caption cannot be saved (a read-only folder or file), or None."""
        target = self.target_file(image)
        if target.exists() and not os.access(target, os.W_OK):
            return f"{target} is read-only; make it writable to edit this caption"
        if not os.access(target.parent, os.W_OK):
            return f"the folder {target.parent} is read-only; make it writable or copy the dataset to edit captions"
        return None

    def target_file(self, image: Path) -> Path:
        entry = self.entries[image]
        if entry.caption_path is not None and entry.caption_source in ("txt", "caption", "metadata"):
            return entry.caption_path
        return image.with_suffix(self.caption_extension)

    # ------------------------------------------------------------ saving

    def flush(self, images: Iterable[Path] | None = None, force: Iterable[Path] = ()) -> SaveReport:
        """Write pending edits; a file changed elsewhere is reported as a conflict unless forced."""
        report = SaveReport()
        todo = sorted(self._dirty if images is None else set(images) & self._dirty)
        forced = set(force)
        sidecars: dict[Path, str] = {}
        sidecar_owner: dict[Path, Path] = {}
        by_metadata: dict[Path, list[Path]] = {}
        for image in todo:
            entry = self.entries[image]
            target = self.target_file(image)
            if entry.caption_source == "metadata" and target.name == METADATA_FILE:
                by_metadata.setdefault(target, []).append(image)
                continue
            ours = entry.caption or ""
            if image in self._created and entry.caption == self._original[image][0]:
                self._remove_created(image, target, report)
                continue
            if entry.caption is None and self._disk[image] is None:
                self._dirty.discard(image)  # no caption before, none now: nothing to write
                continue
            if image not in forced:
                try:
                    disk = _read_text_or_none(target)
                except OSError as exc:
                    report.errors.append(CaptionSaveError(image, target, _reason(exc)))
                    continue
                if disk != self._disk[image] and disk != ours:
                    report.conflicts.append(CaptionConflict(image, target, disk, ours))
                    continue
            sidecars[target] = ours
            sidecar_owner[target] = image
        failed = write_texts_atomically(sidecars)
        for target, image in sidecar_owner.items():
            if target in failed:
                report.errors.append(CaptionSaveError(image, target, _reason(failed[target])))
            else:
                self._saved(image, target, sidecars[target], report)
        for jsonl, owned in by_metadata.items():
            self._flush_metadata(jsonl, owned, forced, report)
        return report

    def _remove_created(self, image: Path, target: Path, report: SaveReport) -> None:
        entry = self.entries[image]
        try:
            disk = _read_text_or_none(target)
            if disk is not None and disk != self._disk[image]:
                report.conflicts.append(CaptionConflict(image, target, disk, entry.caption or ""))
                return
            target.unlink(missing_ok=True)
        except OSError as exc:
            report.errors.append(CaptionSaveError(image, target, _reason(exc)))
            return
        self._created.discard(image)
        self._disk[image] = None
        self._dirty.discard(image)
        entry.caption_path, entry.caption_source = None, self._original[image][1]
        report.saved.append(image)

    def _saved(self, image: Path, target: Path, text: str, report: SaveReport) -> None:
        entry = self.entries[image]
        self._disk[image] = text
        self._dirty.discard(image)
        if entry.caption_path is None:
            self._created.add(image)
            entry.caption_path = target
            entry.caption_source = "caption" if target.suffix == ".caption" else "txt"
        entry.caption_utf8 = True
        report.saved.append(image)

    def _flush_metadata(self, jsonl: Path, images: list[Path], forced: set[Path], report: SaveReport) -> None:
        try:
            lines = jsonl.read_text(encoding="utf-8-sig").splitlines()
        except OSError as exc:
            report.errors.extend(CaptionSaveError(i, jsonl, _reason(exc)) for i in images)
            return
        rows: dict[Path, int] = {}
        for number, line in enumerate(lines):
            try:
                row = json.loads(line)
                rows[Path(os.path.normpath(jsonl.parent / row["file_name"]))] = number
            except (json.JSONDecodeError, TypeError, KeyError):
                continue  # a broken line is kept as it is
        written: list[Path] = []
        for image in images:
            ours = self.entries[image].caption or ""
            found = rows.get(image)
            if found is None:
                row = {"file_name": image.relative_to(jsonl.parent).as_posix(), "text": ours}
                lines.append(json.dumps(row, ensure_ascii=False))
                written.append(image)
                continue
            row = json.loads(lines[found])
            disk = str(row.get("text", row.get("caption", ""))).replace("\r\n", "\n").strip()
            if image not in forced and disk != self._disk[image] and disk != ours:
                report.conflicts.append(CaptionConflict(image, jsonl, disk, ours))
                continue
            row["caption" if "text" not in row and "caption" in row else "text"] = ours
            lines[found] = json.dumps(row, ensure_ascii=False)
            written.append(image)
        if not written:
            return
        failed = write_texts_atomically({jsonl: "\n".join(lines) + "\n"})
        for image in written:
            if jsonl in failed:
                report.errors.append(CaptionSaveError(image, jsonl, _reason(failed[jsonl])))
            else:
                self._saved(image, jsonl, self.entries[image].caption or "", report)

    def take_disk_text(self, conflict: CaptionConflict) -> None:
        """Resolve a conflict by adopting the text on disk (the person's edit is dropped)."""
        entry = self.entries[conflict.image]
        entry.caption = conflict.disk_text
        self._disk[conflict.image] = conflict.disk_text
        self._dirty.discard(conflict.image)

    def keep_ours(self, conflict: CaptionConflict) -> SaveReport:
        """Resolve a conflict by overwriting the file with the person's text."""
        return self.flush([conflict.image], force=[conflict.image])


def _reason(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied (the file or folder is read-only)"
    return exc.strerror or str(exc)
