"""Resuming a run: the newest complete checkpoint that suits this run, loaded into the trainer's models,
optimizer, scheduler, shards and weight average (an older one, named, when the newest is damaged)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio.train.progress.reporting import Reporter
from studio.train.saving.checkpoint_check import checkpoint_problem, resume_from
from studio.train.saving.checkpoints import complete_checkpoints, load_checkpoint, trainable_state


def resume_state(run_dir: Path, accelerator: Any, scheduler: Any, sharding: Any, ema: Any,
                 reporter: Reporter) -> dict[str, Any] | None:
    """The loaded checkpoint's state (its step and epoch), or None (said) when the run has none to resume."""
    found = complete_checkpoints(run_dir)
    if not found:
        reporter.warn("no complete checkpoint in this run; training starts from step 0")
        return None
    shapes = [{name: tuple(t.shape) for name, t in trainable_state(accelerator.unwrap_model(m)).items()}
              for m in accelerator._models]

    def load(folder: Path) -> dict[str, Any]:
        sharding.check_checkpoint(folder)
        reporter.phase("loading", 0, 1, f"resuming from {folder}")
        state = load_checkpoint(accelerator, folder, scheduler)
        sharding.load(folder)
        if ema is not None:
            ema.load(folder)
        return state

    state: dict[str, Any] = resume_from(
        found, lambda folder: checkpoint_problem(folder, shapes, len(accelerator._optimizers)), load, reporter.warn)
    return state
