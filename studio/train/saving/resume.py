"""Resuming a run: the newest complete checkpoint that suits this run, loaded into the trainer's models,
optimizer, scheduler, shards and weight average (an older one, named, when the newest is damaged)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from studio.core.text import plural
from studio.train.progress.reporting import Reporter
from studio.train.saving.checkpoint_check import checkpoint_problem, resume_from
from studio.train.saving.checkpoints import complete_checkpoints, load_checkpoint, trainable_state


def resume_state(run_dir: Path, accelerator: Any, scheduler: Any, sharding: Any, ema: Any,
                 reporter: Reporter, total: int, global_batch: int, accumulation: int) -> dict[str, Any] | None:
    """The loaded checkpoint's state (its step and epoch), or None (said) when the run has none to resume.

    `total`, `global_batch` (images of a micro-batch over all processes) and `accumulation` are this run's:
    where they differ from the checkpoint's, a warning says so."""
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
    changed = changed_since(state, total, accumulation, global_batch)
    if changed:
        reporter.warn(changed, hint=f"if that was not meant, stop the run, set it back in {run_dir / 'config.toml'} "
                      "(or launch it on as many GPUs as before) and resume again")
    return state


def checkpoint_state(step: int, epoch: int, total: int, global_batch: int, accumulation: int) -> dict[str, Any]:
    """What a checkpoint records of the run beside its weights: where it is, and the run's shape that
    `changed_since` compares at a resume."""
    return {"step": step, "epoch": epoch, "total_steps": total, "micro_batch": step * accumulation,
            "global_batch": global_batch, "time": time.time()}


def changed_since(state: dict[str, Any], total: int, accumulation: int, global_batch: int) -> str:
    """What differs between the run that wrote a checkpoint and this one ('' when nothing does): its config
    edited (max_steps, epochs, batch size, accumulation), the images of a batch spread over another number of
    GPUs, or an update that counts steps otherwise. Such a run goes on from the checkpoint, but not with the
    batches or the learning-rate schedule it would have had without the stop, so it is said. (The same
    global batch on fewer GPUs, each taking more, trains the same batches: nothing to say.)"""
    step = int(state["step"])
    then = (int(state.get("total_steps", total)), int(state.get("global_batch", global_batch)),
            int(state.get("micro_batch", step * accumulation)) // step if step else accumulation)
    now = (total, global_batch, accumulation)
    if then == now:
        return ""

    def shape(steps: int, images: int, accumulated: int) -> str:
        return (f"{plural(steps, 'step')}, batches of {plural(images, 'image')} over all GPUs, gradient "
                f"accumulation {accumulated}")

    return (f"the checkpoint of step {step} was written by a run of {shape(*then)}; this run has {shape(*now)}: "
            f"it goes on from step {step}, but not with the batches or learning-rate schedule the run would have "
            "had without the stop")
