"""A project: a folder holding `studio.toml` (the TrainConfig) and `runs/`.

A project can live in its image folder or apart from it. Either way the images stay
where they are: a new project's concepts point at the folders `detect_layout` finds,
with paths relative to the project.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from studio.core.config.errors import ConfigError
from studio.core.config.files.merge import merge_configs
from studio.core.config.files.toml_file import NewerConfigError, load_config, save_config
from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
from studio.core.dataset.layouts import DatasetLayout, detect_layout
from studio.core.families import DEFAULT_FAMILY
from studio.core.models.known import default_base
from studio.core.project_lock import project_lock

PROJECT_FILE = "studio.toml"
RUNS_DIR = "runs"


@dataclass(frozen=True)
class Project:
    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / PROJECT_FILE

    @property
    def runs_dir(self) -> Path:
        return self.root / RUNS_DIR

    @property
    def name(self) -> str:
        return self.root.name

    def load_config(self) -> TrainConfig:
        return load_config(self.config_path)

    def save_config(self, config: TrainConfig, base: TrainConfig | None = None) -> TrainConfig:
        """Write studio.toml under the project's lock; returns the config written (NewerConfigError: the file is
        a newer studio's, and stays as it is).

        `base`: the config this window loaded. Then only what changed from it is written over the
        file as it is now, so another window's save to other keys just before is kept."""
        with project_lock(self.root):
            if self.config_path.is_file():
                try:
                    theirs = load_config(self.config_path)
                except NewerConfigError:
                    raise  # a newer studio's file: this one's config (its defaults) never replaces it
                except ConfigError:
                    # A person's broken edit, or keys this studio does not know: the window's valid config
                    # replaces it, and the file is kept beside it (all its settings, to copy back by hand).
                    theirs = None
                    keep_unreadable(self.config_path)
                if base is not None and theirs is not None and theirs != base:
                    config = merge_configs(base, config, theirs)
            save_config(config, self.config_path)
        return config

    def resolve(self, value: str) -> Path:
        """A path from the config, made absolute against the project folder."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.root / p)


UNREADABLE_SUFFIX = ".unreadable"


def keep_unreadable(path: Path) -> Path:
    """Copy a studio.toml that cannot be read to `studio.toml.unreadable` (`-2`, `-3`, ... when that is taken)
    before it is written over; returns the copy."""
    for number in range(1, 1000):
        kept = path.with_name(path.name + UNREADABLE_SUFFIX + ("" if number == 1 else f"-{number}"))
        if not kept.exists():
            break
    kept.write_bytes(path.read_bytes())
    return kept


def is_project(path: str | Path) -> bool:
    return (Path(path) / PROJECT_FILE).is_file()


def open_project(path: str | Path) -> Project:
    root = Path(path).expanduser().resolve()
    if not is_project(root):
        raise FileNotFoundError(f"{root} is not a studio project: it has no {PROJECT_FILE}")
    return Project(root)


def default_config(image_folder: str = "images") -> TrainConfig:
    """The config of a new project: a LoRA of the default family (SD1.5) on one image folder."""
    return TrainConfig(
        model=ModelSection(family=DEFAULT_FAMILY, base=default_base(DEFAULT_FAMILY)),
        dataset=DatasetSection(concepts=[ConceptSection(path=image_folder)]),
    )


def concept_path(folder: Path, project_root: Path) -> str:
    """How a concept names `folder`: relative to the project (with /) where it can be, else absolute."""
    try:
        rel = os.path.relpath(folder, project_root)
    except ValueError:  # another drive on Windows
        return str(folder)
    return Path(rel).as_posix()


def concepts_from_layouts(layouts: Sequence[DatasetLayout], project_root: Path) -> list[ConceptSection]:
    return [ConceptSection(path=concept_path(found.folder, project_root), repeats=found.repeats)
            for layout in layouts for found in layout.concepts]


def config_for_images(project_root: Path, image_folders: Sequence[Path], family: str = DEFAULT_FAMILY,
                      base: str | None = None) -> TrainConfig:
    """A new project's config: a LoRA of `family` on the concepts found in `image_folders`.

    A folder with no images yet becomes one concept, so the Dataset page shows where to add them.
    """
    layouts = [detect_layout(folder) for folder in image_folders if folder.exists()]
    concepts = concepts_from_layouts(layouts, project_root)
    if not concepts:
        concepts = [ConceptSection(path=concept_path(folder, project_root)) for folder in image_folders]
    # A folder of edit pairs makes an edit-pair project: its control images are read as controls, not trained on.
    kind = "edit" if any(layout.kind == "edit" for layout in layouts) else "images"
    dataset = DatasetSection(concepts=concepts, kind=kind)
    masks = next((layout.mask_folder for layout in layouts if layout.mask_folder is not None), None)
    if masks is not None:  # img/ and masks/ side by side: the masks weight the loss, they are not trained on
        dataset = DatasetSection(concepts=concepts, kind=kind, masks="folder",
                                 mask_folder=concept_path(masks, project_root))
    return TrainConfig(model=ModelSection(family=family, base=base or default_base(family)), dataset=dataset)


def create_project(path: str | Path, config: TrainConfig | None = None,
                   images: Sequence[str | Path] | None = None) -> Project:
    """Make `path` a project (creating the folder); an existing studio.toml is kept.

    Without a config, the concepts come from the layout of the `images` folders (default:
    the project folder itself), and a masks/ folder beside them becomes the mask folder; nothing in them is moved or changed. A project folder
    with no images gets an empty `images/` folder to put them in.
    """
    root = Path(path).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    project = Project(root)
    if not project.config_path.exists():
        if config is None:
            folders = [Path(f).expanduser().resolve() for f in images] if images else [root]
            if not images and not detect_layout(root).concepts:
                (root / "images").mkdir(exist_ok=True)
                folders = [root / "images"]
            config = config_for_images(root, folders)
        project.runs_dir.mkdir(exist_ok=True)
        project.save_config(config)
    project.runs_dir.mkdir(exist_ok=True)
    return project
