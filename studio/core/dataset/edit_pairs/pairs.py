"""An edit pair as the trainer and the studio read it: the target, its control images, the instruction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.dataset.edit_pairs.controls import ControlSettings
from studio.core.dataset.layouts import DatasetError, resolve_folder
from studio.core.dataset.scan import ImageEntry, scan_concept_report

if TYPE_CHECKING:
    from studio.core.config.schema import DatasetSection


@dataclass(frozen=True)
class EditPair:
    target: Path  # the image the model learns to make
    controls: tuple[Path, ...]  # the images it starts from, in the order the pipeline takes them
    instruction: str | None  # what to change: the target's caption; None when it has none
    instruction_path: Path | None  # the caption file the instruction is read from and saved to
    repeats: int = 1


def control_settings(dataset: DatasetSection, base_dir: Path | None) -> ControlSettings | None:
    """How a config's dataset section finds its control images; None unless dataset.kind = "edit"."""
    if dataset.kind != "edit":
        return None
    return ControlSettings(dataset.control_layout, tuple(resolve_folder(f, base_dir) for f in dataset.control_folders))


def edit_pair(entry: ImageEntry) -> EditPair:
    """The pair of a scanned target (its caption is the instruction)."""
    return EditPair(entry.path, entry.controls, entry.caption, entry.caption_path, entry.repeats)


def read_edit_pairs(dataset: DatasetSection, base_dir: Path | None = None) -> list[EditPair]:
    """Every complete pair (a target with at least one control) of an edit-pair dataset, in file order.

    Raises DatasetError when dataset.kind is not "edit" or a concept folder is missing; targets without a
    control are left out (`check_concepts` names them).
    """
    controls = control_settings(dataset, base_dir)
    if controls is None:
        raise DatasetError("The dataset is not edit pairs (dataset.kind is \"images\"); set dataset.kind = \"edit\" "
                           "to read each image with its control images.")
    pairs: list[EditPair] = []
    for concept in dataset.concepts:
        pairs.extend(edit_pair(e) for e in scan_concept_report(concept, base_dir, controls).entries if e.controls)
    return pairs
