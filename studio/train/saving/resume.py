"""Resuming a run: the newest complete checkpoint that suits this run, loaded into the trainer's models,
optimizer, scheduler, shards and weight average (an older one, named, when the newest is damaged)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from studio.core.config.schema import MethodSection, TrainConfig, TrainingSection
from studio.core.runs.event_reading.files import events_backwards
from studio.core.runs.events import RunStarted
from studio.core.runs.folders import EVENTS_FILE
from studio.core.text import plural
from studio.train.errors import TrainError
from studio.train.progress.reporting import Reporter
from studio.train.saving.checkpoint_check import checkpoint_problem, resume_from
from studio.train.saving.checkpoints import (
    complete_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    read_state,
    trainable_state,
)


def resume_state(run_dir: Path, accelerator: Any, scheduler: Any, sharding: Any, ema: Any,
                 reporter: Reporter, total: int, global_batch: int, accumulation: int,
                 config: TrainConfig) -> dict[str, Any] | None:
    """The loaded checkpoint's state (its step and epoch), or None (said) when the run has none to resume.

    `total`, `global_batch` (images of a micro-batch over all processes) and `accumulation` are this run's:
    where they differ from the checkpoint's, a warning says so. A checkpoint of another network or optimizer than
    `config` builds is refused, naming the settings edited since."""
    found = complete_checkpoints(run_dir)
    if not found:
        reporter.warn("no complete checkpoint in this run; training starts from step 0")
        return None
    shapes = [{name: tuple(t.shape) for name, t in trainable_state(accelerator.unwrap_model(m)).items()}
              for m in accelerator._models]

    def load(folder: Path) -> dict[str, Any]:
        sharding.check_checkpoint(folder)
        refuse_another_optimizer(folder, config.training.optimizer)
        reporter.phase("loading", 0, 1, f"resuming from {folder}")
        state = load_checkpoint(accelerator, folder, scheduler)
        sharding.load(folder)
        if ema is not None:
            ema.load(folder)
        return state

    asked = list(scheduler.base_lrs)  # this run's learning rates, before the checkpoint's schedule replaces them
    # and its weight decay, before the checkpoint's optimizer state replaces the parameter groups
    decays = [group.get("weight_decay") for group in scheduler.optimizer.param_groups]
    state: dict[str, Any] = resume_from(
        found, lambda folder: checkpoint_problem(folder, shapes, len(accelerator._optimizers)), load, reporter.warn,
        lambda: method_edits(run_dir, config.method))
    rates = keep_asked_rates(scheduler, asked)
    if rates:
        reporter.warn(f"the checkpoint of step {state['step']} was written by a run at {rates[0]}; this run's config "
                      f"says {rates[1]}: it goes on at the new rate, from where its schedule was",
                      hint=f"if that was not meant, stop the run, set it back in {run_dir / 'config.toml'} and resume "
                      "again")
    decay = keep_asked_decay(scheduler.optimizer.param_groups, decays)
    if decay:
        reporter.warn(f"the checkpoint of step {state['step']} was written by a run at training.weight_decay = "
                      f"{decay[0]:g}; this run's config says {decay[1]:g}: it goes on with the new weight decay",
                      hint=f"if that was not meant, stop the run, set it back in {run_dir / 'config.toml'} and resume "
                      "again")
    edits = method_edits(run_dir, config.method)  # those the weights still fit: alpha, dropout
    if edits:
        reporter.warn(f"the checkpoint of step {state['step']} was written by a run of other method settings "
                      f"({edits}): it goes on with the new ones (a new alpha scales what was trained so far at once)",
                      hint=f"if that was not meant, stop the run, set them back in {run_dir / 'config.toml'} and "
                      "resume again")
    changed = changed_since(state, total, accumulation, global_batch)
    if changed:
        reporter.warn(changed, hint=f"if that was not meant, stop the run, set it back in {run_dir / 'config.toml'} "
                      "(or launch it on as many GPUs as before) and resume again")
    return state


def refuse_past_the_end(run_dir: Path, total: int, config: TrainConfig, global_batch: int | None = None) -> None:
    """training.max_steps (or epochs) lowered in a stopped run's config.toml below the step of its newest checkpoint:
    the resume loaded the model and filled the caches, trained nothing, and finished "completed" with the
    checkpoint's weights at a step past the one asked, the progress at 4 of 3, and a warning that it "goes on".
    A config error names both numbers and the edit that writes the LoRA from that checkpoint, before the caches
    fill (before the model loads, with max_steps)."""
    newest = latest_checkpoint(run_dir)
    if newest is None or newest[0] <= total:
        return
    step, folder = newest
    kind, count = config.training.length
    asked = (f"training.max_steps = {count}" if kind == "steps"
             else f"training.epochs = {count} ({plural(total, 'step')})")
    path = run_dir / "config.toml"
    try:
        then = read_state(folder).get("global_batch") if kind == "epochs" else None
    except (OSError, ValueError):  # a damaged state: the resume names it later, if it comes to that
        then = None
    if global_batch is not None and then not in (None, global_batch):
        # Epochs count steps of this launch's batches: more GPUs than before make fewer steps of them.
        asked += f" of {plural(global_batch, 'image')} over all GPUs, where the run had {plural(int(then), 'image')}"
    raise TrainError("config", f"this run's config says {asked}, but its checkpoint {folder} is already at step {step}: "
                     "a run cannot go back to an earlier step",
                     f"set training.max_steps = {step} in {path} and resume to write the LoRA of that checkpoint at "
                     f"once (or more, to train on); or start a new run for {plural(total, 'step')}", path=str(path))


def started_with(run_dir: Path) -> dict[str, Any] | None:
    """The config the run's last leg started with (its run_started event, defaults left out), None when the
    events do not say."""
    try:
        started = next(events_backwards(run_dir / EVENTS_FILE, (RunStarted.type,)), None)
    except OSError:
        return None
    return started.config if isinstance(started, RunStarted) else None


def refuse_another_optimizer(folder: Path, now: str) -> None:
    """training.optimizer edited in the run's config.toml before a resume: the checkpoint's optimizer state (AdamW's
    moments, say) was loaded into another optimizer, and the run crashed at its first step with a KeyError and a
    traceback. A config error names the optimizer the checkpoint was written with (its state says; a checkpoint
    of an older studio: the run_started of the leg before), before anything is loaded."""
    then = read_state(folder).get("optimizer")
    if then is None:
        started = started_with(folder.parent.parent)
        if started is None:
            return
        then = started.get("training", {}).get("optimizer", TrainingSection.model_fields["optimizer"].default)
    if then == now:
        return
    config = folder.parent.parent / "config.toml"
    raise TrainError("config", f"the checkpoint {folder} was written with training.optimizer = \"{then}\"; this run's "
                     f"config says \"{now}\": the optimizer's state cannot go on in another optimizer",
                     f"set training.optimizer = \"{then}\" again in {config} and resume; or start a new run with "
                     f"\"{now}\"", path=str(config))


def method_edits(run_dir: Path, method: MethodSection) -> str:
    """The method settings that differ from those the run's last leg started with (its run_started event), in
    words ("method.rank = 16 then, 8 now"); "" when they are the same or the events do not say."""
    started = started_with(run_dir)
    try:
        then = MethodSection.model_validate(started.get("method", {})) if started is not None else None
    except ValueError:  # a config of another version: nothing to name
        return ""
    if then is None:
        return ""
    now = method.model_dump(mode="json")
    return ", ".join(f"method.{key} = {json.dumps(old)} then, {json.dumps(now[key])} now"
                     for key, old in then.model_dump(mode="json").items() if now.get(key) != old)


def keep_asked_rates(scheduler: Any, asked: list[float]) -> tuple[str, str] | None:
    """A learning rate edited in the run's config.toml before a resume: the checkpoint's schedule brought back
    the old one and the edit did nothing, without a word. The schedule goes on from its place at the rates asked
    now; (then, now) in words for the warning, None when they are the same."""
    restored = list(scheduler.base_lrs)
    if len(restored) != len(asked) or all(abs(a - b) <= 1e-12 * max(abs(a), abs(b)) for a, b in zip(
            restored, asked, strict=True)) or not hasattr(scheduler, "lr_lambdas"):
        return None
    scheduler.base_lrs = asked
    for group, base, factor in zip(scheduler.optimizer.param_groups, asked, scheduler.lr_lambdas, strict=True):
        group["initial_lr"], group["lr"] = base, base * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]

    def words(rates: list[float]) -> str:
        named = ["training.learning_rate", *["training.text_encoder_lr"] * (len(rates) - 1)]
        return ", ".join(f"{key} = {rate:g}" for key, rate in dict(zip(named, rates, strict=True)).items())

    return words(restored), words(asked)


def keep_asked_decay(groups: list[dict[str, Any]], asked: list[Any]) -> tuple[float, float] | None:
    """training.weight_decay edited in the run's config.toml before a resume: the checkpoint's optimizer state
    brought the old value back with its parameter groups, and the edit did nothing, without a word. The groups
    take the value asked now; (then, now) for the warning, None when it is the same."""
    restored = [group.get("weight_decay") for group in groups]
    if restored == asked or None in asked or None in restored:
        return None
    for group, value in zip(groups, asked, strict=True):
        group["weight_decay"] = value
    return float(restored[0] or 0.0), float(asked[0] or 0.0)


def checkpoint_state(step: int, epoch: int, total: int, global_batch: int, accumulation: int,
                     optimizer: str) -> dict[str, Any]:
    """What a checkpoint records of the run beside its weights: where it is, the run's shape that
    `changed_since` compares at a resume, and the optimizer whose state it holds."""
    return {"step": step, "epoch": epoch, "total_steps": total, "micro_batch": step * accumulation,
            "global_batch": global_batch, "optimizer": optimizer, "time": time.time()}


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

    if step >= total:  # max_steps set to the checkpoint's step: nothing is left to train
        return (f"the checkpoint of step {step} was written by a run of {shape(*then)}; this run has "
                f"{plural(total, 'step')}: it writes the LoRA of step {step} at once, without training on")
    return (f"the checkpoint of step {step} was written by a run of {shape(*then)}; this run has {shape(*now)}: "
            f"it goes on from step {step}, but not with the batches or learning-rate schedule the run would have "
            "had without the stop")
