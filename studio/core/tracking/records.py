"""What a run's events say to a logger: scalars by step and sample images, one function for live and
finished runs, so TensorBoard or W&B show the same numbers as events.jsonl."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from studio.core.runs.events import Event, RunFinished, RunStarted, Sample, Step, Validation

LOSS, LR, VALIDATION = "train/loss", "train/lr", "validation/loss"
# What `pip install` needs for each logger: the studio's extra, or the package alone.
INSTALL = {"tensorboard": "tensorboard", "wandb": "wandb"}


@dataclass
class Record:
    """One logger call: scalars at a step, or sample images at a step (paths and their captions)."""

    step: int
    scalars: dict[str, float] = field(default_factory=dict)
    images: list[tuple[str, Path]] = field(default_factory=list)  # (tag, file)
    config: dict[str, object] | None = None
    finished: bool = False


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
        return Record(event.step, finished=True)
    return None


class Logger(Protocol):
    def write(self, record: Record) -> None: ...

    def close(self) -> None: ...


class MissingLogger(RuntimeError):
    """A logger's package is not installed: the message says how to install it."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the {INSTALL[name]} package is not installed in this Python environment; install it "
                         f"with `pip install 'studio[logging]'` (or `pip install {INSTALL[name]}`)")
        self.name = name


def open_logger(name: str, run_dir: Path, run_name: str) -> Logger:
    """The logger `name` writing into `run_dir` (MissingLogger when its package is missing)."""
    if name == "tensorboard":
        from studio.core.tracking.tensorboard import TENSORBOARD_DIR, TensorBoardLogger

        return TensorBoardLogger(run_dir / TENSORBOARD_DIR)
    if name == "wandb":
        from studio.core.tracking.wandb_logger import WandbLogger

        return WandbLogger(run_dir, run_name)
    raise ValueError(f"unknown logger {name!r}: use tensorboard or wandb")


class EventMirror:
    """Every event rank 0 writes, passed on to the loggers of output.log_to. A logger that fails is
    dropped with one warning: the run and its events.jsonl go on."""

    def __init__(self, loggers: dict[str, Logger], resolve: Callable[[str], Path],
                 warn: Callable[[str], None]) -> None:
        self.loggers = dict(loggers)
        self.resolve = resolve
        self.warn = warn

    def write(self, event: Event) -> None:
        record = record_of(event, self.resolve)
        if record is None:
            return
        for name, logger in list(self.loggers.items()):
            try:
                logger.write(record)
            except Exception as exc:  # a logger's failure never ends the training
                del self.loggers[name]
                self.warn(f"logging to {name} stopped: {exc.__class__.__name__}: {exc}")

    def close(self) -> None:
        for name, logger in list(self.loggers.items()):
            try:
                logger.close()
            except Exception as exc:
                self.warn(f"closing the {name} log failed: {exc.__class__.__name__}: {exc}")
        self.loggers.clear()
