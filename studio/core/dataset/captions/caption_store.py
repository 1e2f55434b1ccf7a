"""The caption store: edits kept in memory, saved atomically, never over a change made elsewhere.

A caption is saved back in the format it came from: a .txt/.caption sidecar, or its row
of metadata.jsonl (other keys and rows kept). An image whose caption came from a folder
name, a prompt or nowhere gets a new sidecar with the dataset's caption extension.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.dataset.captions.caption_files import FileJob, SaveBatch, write_texts_atomically
from studio.core.dataset.captions.caption_guard import remove_caption_leftovers
from studio.core.dataset.captions.caption_sources import METADATA_FILE, decode_caption
from studio.core.dataset.scan import ImageEntry

__all__ = [
    "CaptionConflict",
    "CaptionEdit",
    "CaptionSaveError",
    "CaptionStore",
    "SaveBatch",
    "SaveReport",
    "write_texts_atomically",
]


_OWN_FILES = ("txt", "caption", "metadata")  # caption sources that are files the caption is saved back to


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

    WRITABLE = "make the folder writable or copy the dataset to a folder you can write to"
    NO_SPACE = "free some space on that disk; it is saved with your next edit, or when the studio closes"
    FOLDER_GONE = ("its folder was moved, renamed or deleted since the dataset was read: read the dataset again "
                   "(Reload on the Dataset page; captions that cannot be saved then go to a recovery file)")

    def __init__(self, image: Path, file: Path, reason: str, advice: str = WRITABLE) -> None:
        self.image, self.file = image, file
        super().__init__(f"Cannot save the caption of {image.name} to {file}: {reason}. "
                         f"Your text is kept in the studio; {advice}.")


@dataclass
class SaveReport:
    saved: list[Path] = field(default_factory=list)  # images whose caption is now on disk
    conflicts: list[CaptionConflict] = field(default_factory=list)
    errors: list[CaptionSaveError] = field(default_factory=list)


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
        self._in_flight: set[Path] = set()  # files a running SaveBatch writes
        # A sidecar's bytes as the scan read it (its encoding, BOM, line ends), kept by its first save: a caption
        # put back to the scanned text (an undo) is written back exactly so.
        self._scanned_bytes: dict[Path, bytes] = {}

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
        return sorted(self._dirty, key=str)  # str: comparing Path objects costs ~50x more

    @property
    def has_pending(self) -> bool:
        return bool(self._dirty)

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
        if entry.caption_path is not None and entry.caption_source in _OWN_FILES:
            return entry.caption_path
        return image.with_suffix(self.caption_extension)

    def folders(self) -> set[Path]:
        """Every folder holding an image or a caption file of this dataset."""
        return {p.parent for e in self.entries.values() for p in (e.path, e.caption_path) if p is not None}

    def remove_leftovers(self, *more: Path) -> list[Path]:
        """Delete what saves killed halfway left in the dataset's folders (and `more`); see `caption_guard`."""
        return remove_caption_leftovers([*sorted(self.folders(), key=str), *more], self.caption_extension)

    # ------------------------------------------------------------ saving

    @property
    def saving(self) -> bool:
        """A batch from `begin_save` is being written and not finished yet."""
        return bool(self._in_flight)

    def flush(self, images: Iterable[Path] | None = None, force: Iterable[Path] = ()) -> SaveReport:
        """Write pending edits now; a file changed elsewhere is reported as a conflict unless forced."""
        batch = self.begin_save(images, force)
        batch.run()
        return self.finish_save(batch)

    def begin_save(self, images: Iterable[Path] | None = None, force: Iterable[Path] = ()) -> SaveBatch:
        """What to write for the pending edits, as plain data whose `run` may go to a worker thread.

        Edits made while the batch runs stay pending and go with the next one; files of a
        batch still running are left out, so two writes of one file never overlap.
        """
        batch = SaveBatch()
        todo = sorted(self._dirty if images is None else set(images) & self._dirty, key=str)
        forced = set(force)
        targets: set[Path] = set()
        # Locals and guarded lookups: hashing a Path is a Python call, and a bulk edit saves 10,000.
        entries, disk, created, in_flight = self.entries, self._disk, self._created, self._in_flight
        for image in todo:
            entry = entries[image]
            if entry.caption_path is not None and entry.caption_source in _OWN_FILES:
                target = entry.caption_path
            else:
                target = image.with_suffix(self.caption_extension)
            if in_flight and target in in_flight:
                continue
            expected = disk[image]
            if created and image in created and entry.caption == self._original[image][0]:
                batch.sidecars.append(FileJob(image, target, "", expected, remove=True))
            elif entry.caption_source == "metadata" and target.name == METADATA_FILE:
                batch.metadata.setdefault(target, []).append(
                    FileJob(image, target, entry.caption or "", expected, check=not forced or image not in forced))
            elif entry.caption is None and expected is None:
                self._dirty.discard(image)  # no caption before, none now: nothing to write
                continue
            else:
                scanned = self._scanned_bytes.get(image) if self._scanned_bytes else None
                if scanned is not None and entry.caption != self._original[image][0]:
                    scanned = None  # the scanned bytes go back only with the scanned text
                batch.sidecars.append(
                    FileJob(image, target, entry.caption or "", expected, check=not forced or image not in forced,
                            data=scanned))
            targets.add(target)
        self._in_flight |= targets
        return batch

    def finish_save(self, batch: SaveBatch, jobs: Iterable[FileJob] | None = None,
                    report: SaveReport | None = None) -> SaveReport:
        """Take back a batch that has run: record what is on disk now and report conflicts and errors.

        `jobs` may be a slice of `batch.jobs` (the GUI takes a big batch back in slices), added to `report`.
        """
        report = report if report is not None else SaveReport()
        for job in batch.jobs if jobs is None else jobs:
            self._in_flight.discard(job.target)
            entry = self.entries[job.image]
            if job.outcome == "conflict":
                report.conflicts.append(CaptionConflict(job.image, job.target, job.disk, entry.caption or ""))
            elif job.outcome == "error":
                assert job.error is not None
                report.errors.append(CaptionSaveError(job.image, job.target, _reason(job.error), _advice(job)))
            elif job.outcome == "saved" and job.remove:
                self._created.discard(job.image)
                self._disk[job.image] = None
                entry.caption_path, entry.caption_source = None, self._original[job.image][1]
                if entry.caption == self._original[job.image][0]:
                    self._dirty.discard(job.image)
                report.saved.append(job.image)
            elif job.outcome == "saved":
                self._saved(job.image, job.target, job.text, report)
                self._keep_scanned_bytes(job)
        return report

    def _saved(self, image: Path, target: Path, text: str, report: SaveReport) -> None:
        entry = self.entries[image]
        self._disk[image] = text
        if (entry.caption or "") == text:
            self._dirty.discard(image)  # else it was edited again while saving and stays pending
        if entry.caption_path is None:
            self._created.add(image)
            entry.caption_path = target
            entry.caption_source = "caption" if target.suffix == ".caption" else "txt"
        entry.caption_utf8 = True
        report.saved.append(image)

    def _keep_scanned_bytes(self, job: FileJob) -> None:
        image = job.image
        if job.data is not None:
            self.entries[image].caption_utf8 = decode_caption(job.data)[1]  # as the scan found it
        elif (job.displaced is not None and image not in self._scanned_bytes and image not in self._created
              and decode_caption(job.displaced)[0] == self._original[image][0]):
            self._scanned_bytes[image] = job.displaced

    def take_disk_text(self, conflict: CaptionConflict) -> None:
        """Resolve a conflict by adopting the text on disk (the person's edit is dropped)."""
        entry = self.entries[conflict.image]
        entry.caption = conflict.disk_text
        self._disk[conflict.image] = conflict.disk_text
        self._dirty.discard(conflict.image)

    def keep_ours(self, conflict: CaptionConflict) -> SaveReport:
        """Resolve a conflict by overwriting the file with the person's text."""
        return self.flush([conflict.image], force=[conflict.image])


def _advice(job: FileJob) -> str:
    """What to do about a caption that could not be written (`job.error`)."""
    assert job.error is not None
    if job.error.errno in (errno.ENOSPC, errno.EDQUOT):
        return CaptionSaveError.NO_SPACE
    if job.error.errno == errno.ENOENT and not job.target.parent.is_dir():
        return CaptionSaveError.FOLDER_GONE
    return CaptionSaveError.WRITABLE


def _reason(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied (the file or folder is read-only)"
    return exc.strerror or str(exc)
