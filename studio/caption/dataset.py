"""The images a captioning job works on: an image folder, or every concept of a project."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from studio.core.config.errors import ConfigError
from studio.core.config.schema import ConceptSection
from studio.core.dataset.captions.caption_store import CaptionStore
from studio.core.dataset.edit_pairs.controls import ControlSettings
from studio.core.dataset.edit_pairs.pairs import control_settings
from studio.core.dataset.scan import DatasetError, scan_concept_report
from studio.core.families import DEFAULT_FAMILY
from studio.core.project.folder import is_project, open_project


@dataclass
class CaptionDataset:
    folder: Path  # the folder given (an image folder or a project); the progress file lives here
    store: CaptionStore
    images: list[Path]  # every image, in dataset order
    family: str = DEFAULT_FAMILY  # a project's model family: its text encoder decides which captions are long


def open_dataset(folder: Path) -> CaptionDataset:
    """Scan an image folder (kohya N_name folders inside are read) or a project's concepts.

    An edit-pair project's control images are left out, as the trainer and the Dataset page leave them:
    only the targets carry the captions.

    Raises DatasetError for a folder that is missing or a project whose config is broken.
    """
    if not folder.is_dir():
        raise DatasetError(f"{folder} is not a folder; give the folder holding the images or a project folder.")
    folder = folder.resolve()
    extension, family = ".txt", DEFAULT_FAMILY
    controls: ControlSettings | None = None
    if is_project(folder):
        project = open_project(folder)
        try:
            config = project.load_config()
        except ConfigError as exc:
            raise DatasetError(f"The project {folder} has a broken studio.toml: {exc}") from exc
        concepts, base, extension = list(config.dataset.concepts), project.root, config.dataset.caption_extension
        family, controls = config.model.family, control_settings(config.dataset, project.root)
    else:
        concepts, base = [ConceptSection(path=str(folder))], None
    entries = [entry for concept in concepts for entry in scan_concept_report(concept, base, controls).entries]
    store = CaptionStore(entries, extension)
    store.remove_leftovers(folder)  # saves killed halfway (a job or the studio stopped hard)
    return CaptionDataset(folder, store, [e.path for e in entries], family)
