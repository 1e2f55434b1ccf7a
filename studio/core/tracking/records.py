"""The loggers of output.log_to, opened by name, and the mirror that passes rank 0's events on to them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from studio.core.runs.events import Event
from studio.core.tracking.base import Logger, MissingLogger, Record, record_of

__all__ = ["EventMirror", "Logger", "MissingLogger", "Record", "open_logger", "record_of"]


def open_logger(name: str, run_dir: Path, run_name: str,
                warn: Callable[[str, str | None, str], None] | None = None) -> Logger:
    """The logger `name` writing into `run_dir` (MissingLogger when its package is missing); `warn(message,
    path, hint)` tells the run about a logger that goes on differently than asked (W&B offline)."""
    if name == "tensorboard":
        from studio.core.tracking.tensorboard import TENSORBOARD_DIR, TensorBoardLogger

        return TensorBoardLogger(run_dir / TENSORBOARD_DIR)
    if name == "wandb":
        from studio.core.tracking.wandb_logger import WandbLogger

        return WandbLogger(run_dir, run_name, warn)
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
