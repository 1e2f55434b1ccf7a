"""The demo project a person sees on first start: shapes with captions and a tiny SD1.5 model.

The dataset is written by Pillow here; the tiny model needs torch, so it is built by
`studio-train tiny sd15` in a subprocess (the GUI never imports torch).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.families import DEFAULT_FAMILY
from studio.core.project.folder import PROJECT_FILE, Project, create_project
from studio.core.studio_command import studio_command
from studio.core.user_dirs import data_dir

DEMO_DATA = "data/shapes"
# The demo trains a tiny model of the default family.
DEMO_FAMILY = DEFAULT_FAMILY
DEMO_MODEL = f"models/tiny-{DEMO_FAMILY}"
# Written into the demo project: the demo is this project, not any project whose model folder has
# the tiny model's name.
DEMO_MARKER = ".studio-demo"


class NotTheDemoError(ValueError):
    """The folder given for the demo is a project of the person's own; the message says what to do."""


def default_demo_dir() -> Path:
    return data_dir() / "demo-project"


def demo_config() -> TrainConfig:
    """A LoRA run of the tiny model that finishes in well under a minute on a CPU."""
    return TrainConfig(
        model=ModelSection(family=DEMO_FAMILY, base=DEMO_MODEL, dtype="fp32"),
        dataset=DatasetSection(concepts=[ConceptSection(path=DEMO_DATA)], resolution=64, buckets=False),
        training=TrainingSection(
            batch_size=4, max_steps=60, learning_rate=1e-3, seed=1, mixed_precision="no", lr_warmup_steps=0
        ),
        sampling=SamplingSection(
            every_n_steps=20,
            prompts=["a red circle on a blue background", "a yellow triangle on a black background"],
            steps=8,
            guidance=4.0,
            seed=7,
        ),
        output=OutputSection(name="demo", save_every_n_steps=20, keep_last=2),
    )


def model_command(project: Project, python: str | None = None) -> list[str]:
    """The command that builds the tiny model of a demo project (torch: the training environment's Python). The
    folder is the studio's own: a build an earlier studio left half done (without its built-folder marker) is
    replaced, not refused as a person's model."""
    return studio_command(["tiny", DEMO_FAMILY, str(project.root / DEMO_MODEL), "--force"], python=python)


def is_demo_project(project: Project) -> bool:
    """The studio's demo project: its marker, or the demo's own folder (made before there was one)."""
    if (project.root / DEMO_MARKER).is_file():
        return True
    try:
        return project.root.resolve() == default_demo_dir().resolve()
    except OSError:
        return False


def demo_model_ready(project: Project) -> bool:
    return (project.root / DEMO_MODEL / "model_index.json").is_file()


def create_demo_project(path: str | Path | None = None, build_model: bool = False) -> Project:
    """Create (or complete) the demo project; an existing one keeps its captions and runs."""
    from studio.core.dataset.demo_shapes import write_demo_dataset

    root = Path(path) if path else default_demo_dir()
    if (root / PROJECT_FILE).is_file() and not is_demo_project(Project(root)):
        # Its studio.toml would stay, and the demo's shapes, marker and tiny model would be added to it.
        raise NotTheDemoError(f"{root} is a studio project of your own, not the demo: nothing was changed in it. "
                              "Give a new folder (or the demo's own) for the demo project.")
    project = create_project(root, demo_config())
    data = root / DEMO_DATA
    if not data.is_dir() or not any(data.iterdir()):
        write_demo_dataset(data)
    marker = root / DEMO_MARKER
    if not marker.exists():
        marker.write_text("The studio's demo project (File → Open Demo Project).\n", encoding="utf-8")
    if build_model and not demo_model_ready(project):
        subprocess.run(model_command(project), check=True, capture_output=True, text=True)
    return project


def is_demo_model(base: str) -> bool:
    """Whether a config's base model is the demo's tiny model with random weights."""
    return Path(base).as_posix().rstrip("/").endswith(DEMO_MODEL)
