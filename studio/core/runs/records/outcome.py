"""How a run ended, read from its events: what `studio-train` and the studio say when a trainer exits.

No torch here: `studio-train resume` asks whether a run completed before it starts anything.
"""

from __future__ import annotations

from pathlib import Path

from studio.core.app_words import command_or_action
from studio.core.quoting import command_line
from studio.core.runs.event_reading.files import events_backwards, last_kept_validation
from studio.core.runs.events import Error, RunFinished, RunStarted, Validation
from studio.core.runs.folders import CONFIG_FILE, EVENTS_FILE, OUTPUT_DIR
from studio.core.runs.records.phase_times import phase_summary
from studio.core.runs.records.run_model import RunModel
from studio.core.text import plural

# The prefix of the lines the studio itself adds to a run's console.log.
STUDIO_PREFIX = "[studio]"
_LEG_END = (RunStarted.type, RunFinished.type, Error.type)


def last_finish(run_dir: Path) -> tuple[RunFinished | None, Error | None]:
    """The last leg's `run_finished` event and its last `error` (None where there is none: a leg killed
    or still running has no run_finished).

    Read back from the end of the file, a few MB at most: a run_finished is its leg's last event, so a
    gigabyte of steps before it is never read.
    """
    events = run_dir / EVENTS_FILE
    if not events.is_file():
        return None, None
    finished: RunFinished | None = None
    error: Error | None = None
    for event in events_backwards(events, _LEG_END):
        if isinstance(event, RunStarted):  # the start of the last leg: nothing before it is this leg's
            break
        if isinstance(event, RunFinished) and finished is None:
            finished = event
        elif isinstance(event, Error) and error is None:
            error = event
        if finished is not None and (error is not None or finished.status != "failed"):
            break
    return finished, error


def last_validation(run_dir: Path) -> Validation | None:
    """The run's last validation loss (None where it measured none in the last few MB of events, or only in
    training a resumed leg made again)."""
    events = run_dir / EVENTS_FILE
    return last_kept_validation(events) if events.is_file() else None


def _validation_text(run_dir: Path) -> str:
    last = last_validation(run_dir)
    return f"; validation loss {last.loss:.4f} at step {last.step}" if last is not None else ""


def completed_run(run_dir: Path) -> RunFinished | None:
    """The run's final `run_finished` event when the run completed (its last one says so), else None."""
    finished, _ = last_finish(run_dir)
    return finished if finished is not None and finished.status == "completed" else None


def already_completed_message(run_dir: Path, finished: RunFinished) -> str:
    """Why a completed run is not resumed, where its outputs are, and how to train longer."""
    return (f"the run at {run_dir} already completed {finished.step} steps; outputs are in "
            f"{run_dir / OUTPUT_DIR}; to train longer, copy {run_dir / CONFIG_FILE}, raise "
            "training.max_steps (or training.epochs) in the copy and start a new run with "
            "`studio-train run COPY.toml` (it trains from the base model again)")


def skipped_text(finished: RunFinished) -> str:
    """fp16's skipped steps, said where there were some ("; fp16 skipped ..."): those steps changed nothing."""
    count = finished.skipped_steps
    if not count:
        return ""
    steps = "step" if count == 1 else "steps"
    return (f"; fp16 skipped {count} {steps} (inf or NaN gradients: the weights stayed as they were; "
            "bf16 or a lower learning rate avoids it)")


def _resume(run_dir: Path) -> str:
    return command_or_action(command_line(["studio-train", "resume", str(run_dir)]), "Resume on the Train or Runs page")


def outcome_line(run_dir: Path, exit_code: int | None) -> str:
    """The studio's one-line account of a run whose processes have all ended: the last line of its console."""
    finished, error = last_finish(run_dir)
    if finished is None:
        code = f" (exit code {exit_code})" if exit_code is not None else ""
        return (f"{STUDIO_PREFIX} the trainer ended{code} without finishing the run; the lines above say why; "
                f"continue it with: {_resume(run_dir)}")
    times = phase_summary(finished.phases, finished.images_per_s)
    times = skipped_text(finished) + (f"; time: {times}" if times else "")
    if finished.status == "completed":
        return (f"{STUDIO_PREFIX} run completed at step {finished.step}{_validation_text(run_dir)}{times}; "
                f"outputs in {run_dir / OUTPUT_DIR}")
    if finished.status == "stopped":
        return (f"{STUDIO_PREFIX} run stopped at step {finished.step}{_validation_text(run_dir)}{times}; "
                f"continue it with: {_resume(run_dir)}")
    reason = f"{error.kind}: {error.message}" if error is not None else (finished.message or "no reason given")
    hint = f" ({error.hint.splitlines()[0]})" if error is not None and error.hint else ""
    return f"{STUDIO_PREFIX} run failed at step {finished.step}: {' '.join(reason.split())}{hint}"


def shown_text(model: RunModel) -> str:
    """What a person wants to know of a run just shown: how far it got and what it left."""
    steps = f"step {model.step} of {model.total_steps}" if model.total_steps else plural(model.step, "step")
    parts = [steps, model.status]
    if model.samples:
        parts.append(plural(len(model.samples), "sample image"))
    return ", ".join(parts)
