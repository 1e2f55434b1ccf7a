"""Background work of the Dataset page: scanning folders and checking images off the GUI thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, Signal

from studio.core.config import ConceptSection
from studio.core.dataset import DatasetError, ScanResult, scan_concept_report
from studio.core.dataset_check import (
    Problem,
    caption_problems,
    duplicate_problems,
    image_problems,
    inspect_images,
    scan_problems,
)


@dataclass
class ScanOutcome:
    generation: int
    scans: list[tuple[int, ScanResult]] = field(default_factory=list)  # (concept index, result)
    errors: list[Problem] = field(default_factory=list)


@dataclass
class CheckOutcome:
    generation: int
    problems: list[Problem]
    sizes: dict[Path, tuple[int, int]]


class TaskSignals(QObject):
    sig_scanned = Signal(object)  # ScanOutcome
    sig_checked = Signal(object)  # CheckOutcome
    sig_progress = Signal(int, int)


class ScanTask(QRunnable):
    def __init__(self, generation: int, concepts: list[ConceptSection], base: Path | None,
                 signals: TaskSignals) -> None:
        super().__init__()
        self.generation, self.concepts, self.base, self.signals = generation, concepts, base, signals

    def run(self) -> None:
        outcome = ScanOutcome(self.generation)
        for index, concept in enumerate(self.concepts):
            try:
                outcome.scans.append((index, scan_concept_report(concept, self.base)))
            except (DatasetError, OSError) as exc:
                outcome.errors.append(Problem("error", "folder_missing", concept.path, str(exc),
                                              "fix the concept path in the dataset settings"))
        self.signals.sig_scanned.emit(outcome)


class CheckTask(QRunnable):
    """Reads every image header once: the problems and the sizes for the bucket preview."""

    def __init__(self, generation: int, scans: list[ScanResult], resolution: int, signals: TaskSignals) -> None:
        super().__init__()
        self.generation, self.scans, self.resolution, self.signals = generation, scans, resolution, signals

    def run(self) -> None:
        entries = [e for scan in self.scans for e in scan.entries]
        facts = inspect_images([e.path for e in entries], lambda done, total: self.signals.sig_progress.emit(done, total))
        problems: list[Problem] = []
        for scan in self.scans:
            problems.extend(scan_problems(scan))
        sizes: dict[Path, tuple[int, int]] = {}
        for entry in entries:
            found = facts[entry.path]
            problems.extend(image_problems(entry, found, self.resolution))
            problems.extend(caption_problems(entry))
            if found.size is not None:
                sizes[entry.path] = found.size
        problems.extend(duplicate_problems(e.path for e in entries))
        self.signals.sig_checked.emit(CheckOutcome(self.generation, problems, sizes))
