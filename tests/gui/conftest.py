"""The GUI tests' shared fixtures: a project, its config and a StudioContext, and a RunController / TrainPage
wired to the fake trainer through the real QProcess path (the Train, Runs and export tests use them)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.runs.launch import RunPlan

FAKE_TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "fake_trainer.py"


def fake_command(*extra: str) -> Callable[[RunPlan], list[str]]:
    def factory(plan: RunPlan) -> list[str]:
        return [sys.executable, str(FAKE_TRAINER), str(plan.run_dir), *extra]

    return factory


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    (tmp_path / "data" / "shapes").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def config() -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"family": "sd15", "base": "models/tiny-sd15"},
        "dataset": {"concepts": [{"path": "data/shapes"}]},
        "training": {"max_steps": 30},
        "output": {"dir": "runs", "name": "fake"},
    })


@pytest.fixture
def controller(qtbot: object) -> Iterator[object]:
    from studio.gui.runner.run_controller import RunController

    ctl = RunController(command_factory=fake_command(), finish_grace_ms=3000)
    yield ctl
    ctl.shutdown()
    ctl.deleteLater()


def make_project(root: Path, config: TrainConfig, images: int = 3) -> object:
    from PIL import Image

    from studio.core.project.folder import create_project

    folder = root / "data" / "shapes"
    folder.mkdir(parents=True, exist_ok=True)
    # The fake trainer reads no model, but the preflight wants a diffusers folder where model.base points.
    model = root / "models" / "tiny-sd15"
    model.mkdir(parents=True, exist_ok=True)
    (model / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')
    for i in range(images):
        Image.new("RGB", (64, 64), (40 * i, 90, 90)).save(folder / f"img{i}.png")
        (folder / f"img{i}.txt").write_text("a shape")
    return create_project(root, config)


@pytest.fixture
def context(qtbot: object, tmp_path: Path) -> Iterator[object]:
    from PySide6.QtCore import QSettings

    from studio.gui.context import StudioContext

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    ctx = StudioContext(settings)
    yield ctx
    ctx.run_controller.shutdown()


def shut_down(page: Any) -> None:
    """pytest-qt's before-close hook for pages with a shutdown(): pytest-qt closes and deletes its widgets before
    the fixtures' own teardown, and a shutdown run after that waits on objects already deleted."""
    page.shutdown()


def close_plots(page: Any) -> None:
    """pytest-qt's before-close hook for pages with run plots: empty their scenes before deletion."""
    page.close_plots()
