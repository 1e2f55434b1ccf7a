"""The images a captioning job works on: an image folder, or every concept of a project."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from studio.core.config.errors import ConfigError
from studio.core.config.schema import ConceptSection
from studio.core.dataset.captions.caption_sources import METADATA_FILE
from studio.core.dataset.captions.caption_store import CaptionStore
from studio.core.dataset.edit_pairs.controls import ControlSettings
from studio.core.dataset.edit_pairs.pairs import control_settings
from studio.core.dataset.scan import DatasetError, ImageEntry, scan_concept_report
from studio.core.families import DEFAULT_FAMILY, family
from studio.core.project.folder import is_project, open_project

_SOURCE_WORDS = {"folder": "its folder's name", "prompt": "its instance prompt", "txt": ".txt files only",
                 "caption": ".caption files only", "metadata": "metadata.jsonl only"}


@dataclass
class CaptionDataset:
    folder: Path  # the folder given (an image folder or a project); the progress file lives here
    store: CaptionStore
    images: list[Path]  # every image, in dataset order
    family: str = DEFAULT_FAMILY  # a project's model family: its text encoder decides which captions are long
    # Each image's concept's caption_source: where training reads its caption from.
    sources: dict[Path, str] = field(default_factory=dict)
    use_t5: bool = False  # an SD3 project's T5 reads longer captions than its CLIP encoders

    def token_reader(self) -> tuple[int, str]:
        """The caption tokens the project's text encoders read, and the encoder that reads them."""
        return family(self.family).text_reader(self.use_t5)

    def check_captions_are_read(self, images: list[Path]) -> None:
        """Raise DatasetError when a caption written for one of `images` would never be trained: its concept
        reads captions from elsewhere (its folder name, its prompt, the other sidecar kind)."""
        for image in images:
            source, target = self.sources.get(image, "auto"), self.store.target_file(image)
            if source == "auto" or source == ("metadata" if target.name == METADATA_FILE else target.suffix[1:].lower()):
                continue
            raise DatasetError(
                f"The concept {self.store.entries[image].concept} reads its captions from "
                f"{_SOURCE_WORDS.get(source, source)} (caption_source = \"{source}\"): the {target.name} a model "
                f"writes for {image.name} would never be trained. Set the concept's caption_source to auto, or "
                "leave its images out of the job.")


def open_dataset(folder: Path) -> CaptionDataset:
    """Scan an image folder (kohya N_name folders inside are read) or a project's concepts.

    An edit-pair project's control images are left out, as the trainer and the Dataset page leave them:
    only the targets carry the captions.

    Raises DatasetError for a folder that is missing or a project whose config is broken.
    """
    if not folder.is_dir():
        raise DatasetError(f"{folder} is not a folder; give the folder holding the images or a project folder.")
    folder = folder.resolve()
    extension, family_name, use_t5 = ".txt", DEFAULT_FAMILY, False
    controls: ControlSettings | None = None
    if is_project(folder):
        project = open_project(folder)
        try:
            config = project.load_config()
        except ConfigError as exc:
            raise DatasetError(f"The project {folder} has a broken studio.toml: {exc}") from exc
        concepts, base, extension = list(config.dataset.concepts), project.root, config.dataset.caption_extension
        family_name, controls = config.model.family, control_settings(config.dataset, project.root)
        use_t5 = config.model.use_t5
    else:
        concepts, base = [ConceptSection(path=str(folder))], None
    entries: list[ImageEntry] = []
    sources: dict[Path, str] = {}
    for concept in concepts:
        found = scan_concept_report(concept, base, controls).entries
        entries.extend(found)
        sources.update((entry.path, concept.caption_source) for entry in found)
    store = CaptionStore(entries, extension)
    store.remove_leftovers(folder)  # saves killed halfway (a job or the studio stopped hard)
    return CaptionDataset(folder, store, [e.path for e in entries], family_name, sources, use_t5)
