"""A project: a folder holding `studio.toml` (the TrainConfig) and `runs/`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
from studio.core.config.toml_file import load_config, save_config

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

    def save_config(self, config: TrainConfig) -> None:
        save_config(config, self.config_path)

    def resolve(self, value: str) -> Path:
        """A path from the config, made absolute against the project folder."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.root / p)


def is_project(path: str | Path) -> bool:
    return (Path(path) / PROJECT_FILE).is_file()


def open_project(path: str | Path) -> Project:
    root = Path(path).expanduser().resolve()
    if not is_project(root):
        raise FileNotFoundError(f"{root} is not a studio project: it has no {PROJECT_FILE}")
    return Project(root)


def default_config(image_folder: str = "images") -> TrainConfig:
    """The config of a new project: SD1.5 LoRA on one image folder."""
    return TrainConfig(
        model=ModelSection(family="sd15", base="runwayml/stable-diffusion-v1-5"),
        dataset=DatasetSection(concepts=[ConceptSection(path=image_folder)]),
    )


def create_project(path: str | Path, config: TrainConfig | None = None) -> Project:
    """Make `path` a project (creating the folder); an existing studio.toml is kept."""
    root = Path(path).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    project = Project(root)
    project.runs_dir.mkdir(exist_ok=True)
    if not project.config_path.exists():
        project.save_config(config or default_config())
    return project
