"""Weights & Biases: the same scalars and sample images as events.jsonl, logged by rank 0 at the run's own
steps. `WANDB_MODE=offline` writes the run into RUN_DIR/wandb with no network (`wandb sync` sends it later);
the project is $WANDB_PROJECT, else "studio".

Online, W&B's start waits for its server (90 s by default) while the training waits for it: the start is
bounded (INIT_TIMEOUT_S) and a server that does not answer in time makes the run log offline instead, with
a warning that says where and how to send it later."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.tracking.base import MissingLogger, Record

# How long the training waits for W&B's server at the start, at most, before it logs offline instead.
INIT_TIMEOUT_S = 8.0
# warn(message, path, hint): a warning event of the run.
Warn = Callable[[str, "str | None", str], None]


class WandbLogger:
    def __init__(self, run_dir: Path, run_name: str, warn: Warn | None = None,
                 init_timeout: float | None = None) -> None:
        try:
            import wandb
        except ImportError:
            raise MissingLogger("wandb") from None
        self.wandb = wandb
        self.run: Any = None
        self.run_dir = run_dir
        self.run_name = run_name
        self.project = os.environ.get("WANDB_PROJECT", "studio")
        self.warn = warn
        self.init_timeout = init_timeout if init_timeout is not None else INIT_TIMEOUT_S
        self.offline = False  # True once the start fell back to offline logging
        self.exit_code: int | None = None  # from the run's end: W&B shows a failed run as failed, not finished

    def _start(self, config: dict[str, object] | None) -> Any:
        if self.run is None:
            self.run = self._init(config or {})
        elif config:
            self.run.config.update(config, allow_val_change=True)
        return self.run

    def _init(self, config: dict[str, object]) -> Any:
        # The run folder's name is the W&B run's id, so a resumed run continues the same W&B run.
        options: dict[str, Any] = {"project": self.project, "name": self.run_name, "id": _run_id(self.run_dir.name),
                                   "dir": str(self.run_dir), "config": config, "resume": "allow"}
        try:
            return self.wandb.init(**options, settings=self.wandb.Settings(
                silent=True, console="off", init_timeout=self.init_timeout))
        except Exception as exc:  # its server unreachable or too slow, or refusing the key
            if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
                raise  # offline already: nothing to fall back to, the mirror drops this logger with a warning
            reason = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:300]
        self.wandb.teardown()  # its service still holds the run id of the failed start
        run = self.wandb.init(**options, mode="offline", settings=self.wandb.Settings(silent=True, console="off"))
        self.offline = True
        if self.warn is not None:
            folder = Path(run.dir)
            folder = folder.parent if folder.name == "files" else folder  # the offline run's own folder
            self.warn(f"W&B could not start this run online within {self.init_timeout:.0f} s ({reason}): it logs "
                      f"to W&B offline instead, into {folder}", str(folder),
                      f"once W&B's server can be reached, send it with `wandb sync {folder}`")
        return run

    def write(self, record: Record) -> None:
        run = self._start(record.config)
        data: dict[str, Any] = dict(record.scalars)
        for tag, path in record.images:
            if path.is_file():
                data[tag] = self.wandb.Image(str(path))
        if data:
            run.log(data, step=record.step)
        if record.finished:
            self.exit_code = 1 if record.failed else 0

    def close(self) -> None:
        if self.run is not None:
            self.run.finish(exit_code=self.exit_code)
            self.run = None
            self.wandb.teardown()  # its service process ends with the run, not at the interpreter's exit


def _run_id(name: str) -> str:
    """A W&B run id from the run folder's name (letters, digits, - and _ only)."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:64]
