"""Background work of the Dataset page: listing and reading folders, checking images, saving captions.

Listing (names only) comes first so the grid paints before thousands of caption files are
read. Listing and reading run on the page's worker thread (file-system calls that leave the
interpreter lock free for the window), the check in a helper process.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection
from studio.core.dataset.captions.caption_store import CaptionStore
from studio.core.dataset.checks import Problem, check_worker
from studio.core.dataset.edit_pairs.controls import ControlSettings
from studio.core.dataset.edit_pairs.pairs import control_settings
from studio.core.dataset.scan import (
    ConceptListing,
    DatasetError,
    ImageEntry,
    ScanResult,
    list_concept,
    read_captions,
)
from studio.core.families import DEFAULT_FAMILY
from studio.gui.dataset.grid.grid_search import GridSearch
from studio.gui.dataset.scan.helper_process import HelperProcess


def folder_problem(concept: ConceptSection, exc: Exception) -> Problem:
    return Problem("error", "folder_missing", concept.path, str(exc), "fix the concept path in the dataset settings")


@dataclass
class ListOutcome:
    generation: int
    listings: list[tuple[int, ConceptListing]] = field(default_factory=list)  # (concept index, listing)
    errors: list[Problem] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)  # every image, in grid order
    keys: list[str] = field(default_factory=list)  # str of each path, made here rather than on the GUI thread


@dataclass
class ScanOutcome:
    generation: int
    scans: list[tuple[int, ScanResult]] = field(default_factory=list)  # (concept index, result)
    errors: list[Problem] = field(default_factory=list)
    store: CaptionStore | None = None  # made here, handed to the GUI thread once complete
    tags: Counter[str] = field(default_factory=Counter)
    entries: list[ImageEntry] = field(default_factory=list)  # every scan's, in grid order
    search: GridSearch | None = None  # the grid filter's lookups over `entries`


@dataclass
class CheckOutcome:
    generation: int
    problems: list[Problem]  # in panel order: errors first
    by_path: dict[str, list[str]]  # file -> messages, for the grid
    buckets: dict[tuple[int, int], int]
    failure: str | None = None

    @property
    def errors(self) -> int:
        return next((i for i, p in enumerate(self.problems) if p.severity != "error"), len(self.problems))


def mask_folder(dataset: DatasetSection, base: Path | None) -> Path | None:
    """The folder of loss masks the check reads (dataset.masks = "folder"), or None."""
    if dataset.masks != "folder" or not dataset.mask_folder:
        return None
    masks = Path(dataset.mask_folder).expanduser()
    return masks if masks.is_absolute() or base is None else base / masks


def owning_images(files: Iterable[str], entries: Iterable[ImageEntry], masks: Path | None) -> dict[str, Path]:
    """Of `files` (where the check found problems), those that belong to one image of the grid, with that image:
    its caption sidecar, a control image of its edit pair, its loss mask in `masks` (named as the image).

    A problem found in such a file is the image's to fix: the grid marks the image, and a click on the problem
    goes to it."""
    wanted = set(files)
    owners: dict[str, Path] = {}
    stems: dict[str, Path] = {}
    for entry in entries:
        if entry.caption_path is not None and entry.caption_source in ("txt", "caption"):
            caption = str(entry.caption_path)
            if caption in wanted:
                owners[caption] = entry.path
        for control in entry.controls:
            if str(control) in wanted:
                owners.setdefault(str(control), entry.path)
        if masks is not None:
            stems.setdefault(entry.path.stem, entry.path)
    if masks is not None:
        for file in wanted - owners.keys():
            path = Path(file)
            if path.parent == masks and path.stem in stems:
                owners[file] = stems[path.stem]
    return owners


def problems_by_image(by_path: dict[str, list[str]], owners: dict[str, Path]) -> dict[str, list[str]]:
    """The check's messages by the grid's images: a file's own (an image's) as they are, those of a file an
    image owns (see `owning_images`) under that image, named with the file."""
    found: dict[str, list[str]] = {}
    for file, messages in by_path.items():
        image = owners.get(file)
        if image is None:
            found.setdefault(file, []).extend(messages)
        else:
            found.setdefault(str(image), []).extend(f"{Path(file).name}: {message}" for message in messages)
    return found


def list_folders(generation: int, concepts: list[ConceptSection], base: Path | None,
                 controls: ControlSettings | None = None) -> ListOutcome:
    """The image names of every concept folder (no captions yet); with `controls`, edit pairs' targets
    with their control images."""
    outcome = ListOutcome(generation)
    for index, concept in enumerate(concepts):
        try:
            outcome.listings.append((index, list_concept(concept, base, controls)))
        except (DatasetError, OSError) as exc:
            outcome.errors.append(folder_problem(concept, exc))
    outcome.paths = [path for _, listing in outcome.listings for path in listing.paths]
    outcome.keys = [str(path) for path in outcome.paths]
    return outcome


def read_folders(listed: ListOutcome, caption_extension: str) -> ScanOutcome:
    """The captions of listed folders (the listing objects are not touched by the GUI meanwhile)."""
    outcome = ScanOutcome(listed.generation, errors=list(listed.errors))
    for index, listing in listed.listings:
        try:
            outcome.scans.append((index, read_captions(listing)))
        except OSError as exc:
            outcome.errors.append(folder_problem(listing.concept, exc))
    entries = outcome.entries = [e for _, scan in outcome.scans for e in scan.entries]
    # Saves killed halfway (the studio closed, the power cut) leave hidden temporary files.
    outcome.store = CaptionStore(entries, caption_extension)
    outcome.store.remove_leftovers()
    outcome.search = GridSearch(entries, outcome.tags)  # the tags counted as the captions are read for the filter
    return outcome


class CheckJob(QObject):
    """The full dataset check in a helper process; problems arrive in chunks, then sig_done."""

    sig_progress = Signal(int, int)
    sig_done = Signal(object)  # CheckOutcome

    def __init__(self, generation: int, dataset: DatasetSection, base: Path | None,
                 parent: QObject | None = None, model: ModelSection | None = None) -> None:
        super().__init__(parent)
        self.generation = generation
        self.problems: list[Problem] = []
        self.by_path: dict[str, list[str]] = {}
        self.buckets: dict[tuple[int, int], int] = {}
        self.finished = False
        settings: dict[str, Any] = {"resolution": dataset.resolution, "bucket_step": dataset.bucket_step,
                                    "min_bucket": dataset.min_bucket, "max_bucket": dataset.max_bucket,
                                    "family": model.family if model is not None else DEFAULT_FAMILY,
                                    "use_t5": model is not None and model.use_t5}
        masks = mask_folder(dataset, base)
        if masks is not None:  # the loss masks are checked with the images
            settings["mask_folder"] = str(masks)
        controls = control_settings(dataset, base)
        if controls is not None:  # edit pairs: the control images are checked with their targets
            settings["controls"] = controls.to_json()
        concepts = [c.model_dump(mode="json") for c in dataset.concepts]
        self._helper = HelperProcess(check_worker, (concepts, str(base) if base else None, settings), self)
        self._helper.sig_message.connect(self._message)
        self._helper.sig_exited.connect(lambda: self._finish("the checking process ended unexpectedly"))

    def _message(self, message: Any) -> None:
        kind = message[0]
        if kind == "progress":
            self.sig_progress.emit(message[1], message[2])
        elif kind == "problems":  # a chunk of about a thousand: a few milliseconds here
            for row in message[1]:
                problem = Problem(*row)
                self.problems.append(problem)
                self.by_path.setdefault(problem.path, []).append(problem.message)
        elif kind == "buckets":
            self.buckets = {tuple(size): n for size, n in message[1]}
        elif kind == "done":
            self._finish(None)
        elif kind == "failed":
            self._finish(message[1])

    def _finish(self, failure: str | None) -> None:
        if self.finished:
            return
        self.finished = True
        self._helper.stop()
        self.sig_done.emit(CheckOutcome(self.generation, self.problems, self.by_path, self.buckets, failure))

    def cancel(self, wait: bool = False) -> None:
        self.finished = True
        self._helper.stop(0)
        if wait:
            self._helper.join(5)
