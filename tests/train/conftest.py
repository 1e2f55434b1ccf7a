"""Fixtures of the trainer tests: one tiny pipeline per family and one demo dataset per session."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from studio.core.config import (  # noqa: E402
    ConceptSection,
    DatasetSection,
    ModelSection,
    OutputSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.demo import write_demo_dataset  # noqa: E402
from studio.core.events import Event, parse_event  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> Iterator[None]:
    # The tiny models are fastest on one thread, and the machine is shared.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_sd15(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from studio.train.tiny import build_tiny_pipeline

    return build_tiny_pipeline("sd15", tmp_path_factory.mktemp("models") / "tiny-sd15")


@pytest.fixture(scope="session")
def tiny_sdxl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from studio.train.tiny import build_tiny_pipeline

    return build_tiny_pipeline("sdxl", tmp_path_factory.mktemp("models") / "tiny-sdxl")


@pytest.fixture(scope="session")
def tiny_sd3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from studio.train.tiny import build_tiny_pipeline

    return build_tiny_pipeline("sd3", tmp_path_factory.mktemp("models") / "tiny-sd3")


@pytest.fixture(scope="session")
def tiny_models(tiny_sd15: Path, tiny_sdxl: Path, tiny_sd3: Path) -> dict[str, Path]:
    return {"sd15": tiny_sd15, "sdxl": tiny_sdxl, "sd3": tiny_sd3}


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data") / "shapes"
    write_demo_dataset(folder, count=8, size=64, seed=0)
    return folder


@pytest.fixture
def make_config(tiny_sd15: Path, demo_data: Path, tmp_path: Path,
                request: pytest.FixtureRequest) -> Callable[..., TrainConfig]:
    """A small LoRA config of the demo data for `family` (default sd15); keyword sections override its parts."""

    def make(family: str = "sd15", **sections: object) -> TrainConfig:
        bases = {"sd15": tiny_sd15}
        if family != "sd15":
            bases[family] = request.getfixturevalue(f"tiny_{family}")
        data: dict[str, object] = {
            "model": ModelSection(family=family, base=str(bases[family])),  # type: ignore[arg-type]
            "dataset": DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
            "training": TrainingSection(batch_size=2, max_steps=6, learning_rate=1e-3, seed=1),
            "output": OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers", "kohya"]),
        }
        data.update(sections)
        return TrainConfig(**data)  # type: ignore[arg-type]

    return make


def _run_training(config: TrainConfig, config_dir: Path, resume_dir: Path | None = None) -> tuple[int, Path]:
    from studio.core.config import load_config
    from studio.core.launch import prepare_run
    from studio.train.entry import train

    if resume_dir is not None:
        return train(load_config(resume_dir / "config.toml"), resume_dir, resume=True), resume_dir
    plan = prepare_run(config, config_dir)
    code = train(load_config(plan.run_dir / "config.toml"), plan.run_dir)
    return code, plan.run_dir


def _events_of(run_dir: Path) -> list[Event]:
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        json.loads(line)
        out.append(parse_event(line))
    return out


@pytest.fixture
def run_training() -> Callable[..., tuple[int, Path]]:
    """Prepare a run folder and train in this process (or resume one); (exit code, run folder)."""
    return _run_training


@pytest.fixture
def events_of() -> Callable[[Path], list[Event]]:
    """Every line of a run's events.jsonl parsed strictly: a bad line fails the test."""
    return _events_of


