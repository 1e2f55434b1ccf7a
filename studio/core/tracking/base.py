"""What a run's events say to a logger: scalars by step and sample images, one function for live and
finished runs, so TensorBoard or W&B show the same numbers as events.jsonl."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from studio.core.runs.events import Event, RunFinished, RunStarted, Sample, Step, Validation

LOSS, LR, VALIDATION = "train/loss", "train/lr", "validation/loss"
# What `pip install` needs for each logger: the studio's extra (under its distribution name: "studio" on
# the package index is another project), or the package alone.
LOGGING_EXTRA = "sd-training-studio[logging]"
INSTALL = {"tensorboard": "tensorboard", "wandb": "wandb"}


@dataclass
class Record:
    """One logger call: scalars at a step, or sample images at a step (paths and their captions)."""

    step: int
    scalars: dict[str, float] = field(default_factory=dict)
    images: list[tuple[str, Path]] = field(default_factory=list)  # (tag, file)
    config: dict[str, object] | None = None
    finished: bool = False
    failed: bool = False  # a run_finished whose run failed (out of memory, a crash, a diverged loss)


def record_of(event: Event, resolve: Callable[[str], Path] = Path) -> Record | None:
    """The logger record of one event, or None for events a logger does not show."""
    if isinstance(event, Step):
        scalars = {LOSS: event.loss, LR: event.lr}
        return Record(event.step, {k: float(v) for k, v in scalars.items() if v is not None})
    if isinstance(event, Validation):
        return Record(event.step, {VALIDATION: float(event.loss)})
    if isinstance(event, Sample):
        images = [(f"samples/{index}", resolve(path)) for index, path in enumerate(event.images)]
        return Record(event.step, images=images)
    if isinstance(event, RunStarted):
        return Record(event.resumed_from_step, config=event.config)
    if isinstance(event, RunFinished):
        return Record(event.step, finished=True, failed=event.status == "failed")
    return None


class Logger(Protocol):
    def write(self, record: Record) -> None: ...

    def close(self) -> None: ...


class MissingLogger(RuntimeError):
    """A logger's package is not installed: the message says how to install it."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the {INSTALL[name]} package is not installed in this Python environment; install it "
                         f"with `pip install '{LOGGING_EXTRA}'` (or `pip install {INSTALL[name]}`)")
        self.name = name


