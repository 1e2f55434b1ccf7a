"""Weights & Biases: the same scalars and sample images as events.jsonl, logged by rank 0 at the run's own
steps. `WANDB_MODE=offline` writes the run into RUN_DIR/wandb with no network (`wandb sync` sends it later);
the project is $WANDB_PROJECT, else "studio"."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from studio.core.tracking.base import MissingLogger, Record


class WandbLogger:
    def __init__(self, run_dir: Path, run_name: str) -> None:
        try:
            import wandb
        except ImportError:
            raise MissingLogger("wandb") from None
        self.wandb = wandb
        self.run: Any = None
        self.run_dir = run_dir
        self.run_name = run_name
        self.project = os.environ.get("WANDB_PROJECT", "studio")

    def _start(self, config: dict[str, object] | None) -> Any:
        if self.run is None:
            # The run folder's name is the W&B run's id, so a resumed run continues the same W&B run.
            self.run = self.wandb.init(project=self.project, name=self.run_name, id=_run_id(self.run_dir.name),
                                       dir=str(self.run_dir), config=config or {}, resume="allow",
                                       settings=self.wandb.Settings(silent=True, console="off"))
        elif config:
            self.run.config.update(config, allow_val_change=True)
        return self.run

    def write(self, record: Record) -> None:
        run = self._start(record.config)
        data: dict[str, Any] = dict(record.scalars)
        for tag, path in record.images:
            if path.is_file():
                data[tag] = self.wandb.Image(str(path))
        if data:
            run.log(data, step=record.step)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
            self.wandb.teardown()  # its service process ends with the run, not at the interpreter's exit


def _run_id(name: str) -> str:
    """A W&B run id from the run folder's name (letters, digits, - and _ only)."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:64]
