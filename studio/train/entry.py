"""`python -m studio.train CONFIG.toml | --resume RUN_DIR`: one rank's whole life, errors included.

Every failure a person can act on ends as an `error` event (kind, message, hint)
followed by `run_finished: failed`, and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from studio.core.config.errors import ConfigError
from studio.core.config.paths import load_resolved
from studio.core.config.schema import TrainConfig
from studio.core.config.toml_file import load_config
from studio.core.runs.events import Error, EventWriter, RunFinished, read_events
from studio.core.runs.folders import ACCELERATE_FILE, CONFIG_FILE, EVENTS_FILE, OUTPUT_DIR

EXIT_FAILED = 1
EXIT_CONFIG = 2


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m studio.train", description="Train one run (one rank).")
    parser.add_argument("config", nargs="?", help="a run folder's config.toml, or any config file")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest checkpoint")
    args = parser.parse_args(argv)
    if bool(args.config) == bool(args.resume):
        parser.error("give either CONFIG or --resume RUN_DIR")
    return args


def is_prepared_run(config_path: Path) -> bool:
    return config_path.name == CONFIG_FILE and (config_path.parent / ACCELERATE_FILE).is_file()


def resolve_run(args: argparse.Namespace) -> tuple[TrainConfig, Path, bool]:
    """(config with absolute paths, run folder, resume?); a plain config gets a new run folder."""
    if args.resume:
        run_dir = Path(args.resume).resolve()
        return load_config(run_dir / CONFIG_FILE), run_dir, True
    path = Path(args.config).resolve()
    if is_prepared_run(path):
        return load_config(path), path.parent, False
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(str(path), [])  # handled below with a clearer message
    from studio.core.runs.launch import prepare_run

    plan = prepare_run(load_config(path), path.parent)
    return load_resolved(plan.run_dir / CONFIG_FILE), plan.run_dir, False


def completed_run(run_dir: Path) -> RunFinished | None:
    """The run's final `run_finished` event when the run completed (its last one says so), else None."""
    events = run_dir / EVENTS_FILE
    if not events.is_file():
        return None
    finished = [e for e in read_events(events) if isinstance(e, RunFinished)]
    return finished[-1] if finished and finished[-1].status == "completed" else None


def already_completed_message(run_dir: Path, finished: RunFinished) -> str:
    """Why a completed run is not resumed, where its outputs are, and how to train longer."""
    return (f"the run at {run_dir} already completed {finished.step} steps; outputs are in "
            f"{run_dir / OUTPUT_DIR}; to train longer, copy {run_dir / CONFIG_FILE}, raise "
            "training.max_steps (or training.epochs) in the copy and start a new run with "
            "`studio-train run COPY.toml` (it trains from the base model again)")


def _config_failure(exc: ConfigError, args: argparse.Namespace) -> int:
    if not exc.issues:
        message = f"{exc.source} is not a prepared run folder's config; several processes cannot share it"
        hint = "start the run with `studio-train run CONFIG --processes N`, which prepares the folder"
    else:
        message, hint = exc.describe(), "fix the keys named above"
    print(f"error (config): {message}\n  hint: {hint}", file=sys.stderr)
    folder = Path(args.resume) if args.resume else Path(args.config).parent
    if int(os.environ.get("RANK", "0")) == 0 and (folder / ACCELERATE_FILE).is_file():
        with EventWriter(folder / EVENTS_FILE) as writer:
            writer.write(Error(kind="config", message=message, hint=hint, path=exc.source))
            writer.write(RunFinished(status="failed", message=message))
    return EXIT_CONFIG


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.resume:
        finished = completed_run(Path(args.resume).resolve())
        if finished is not None:
            # A finished run's events stay as they are: nothing is appended to them.
            print(f"error: {already_completed_message(Path(args.resume).resolve(), finished)}", file=sys.stderr)
            return EXIT_FAILED
    try:
        config, run_dir, resume = resolve_run(args)
    except ConfigError as exc:
        return _config_failure(exc, args)
    return train(config, run_dir, resume)


def _quiet_libraries() -> None:
    """Progress bars of model loading would drown the trainer's own lines in console.log."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()


def train(config: TrainConfig, run_dir: Path, resume: bool = False) -> int:
    """Run (or resume) the training of `config` in `run_dir` on this rank; the exit code."""
    import torch

    from studio.train.compilation import shutdown_compile_workers
    from studio.train.errors import TrainError, oom_hint, vram_estimate_text
    from studio.train.reporting import Reporter
    from studio.train.runtime import make_accelerator

    _quiet_libraries()
    accelerator = make_accelerator(config)
    reporter = Reporter(run_dir, accelerator.is_main_process)
    code = 0
    trainer = None
    try:
        from studio.train.loop import Trainer

        trainer = Trainer(config, run_dir, accelerator, reporter, resume=resume)
        finished = trainer.run()
    except TrainError as exc:
        reporter.error(exc.kind, exc.message, exc.hint, exc.path)
        finished, code = RunFinished(status="failed", message=exc.message), EXIT_FAILED
    except torch.OutOfMemoryError as exc:
        t = config.training
        reporter.error("oom", f"the GPU ran out of memory: {str(exc).splitlines()[0]}",
                       oom_hint(t.batch_size, config.dataset.resolution, t.gradient_checkpointing,
                                vram_estimate_text(config)))
        finished, code = RunFinished(status="failed", message="out of memory"), EXIT_FAILED
    except Exception as exc:
        reporter.crash(exc)
        finished, code = RunFinished(status="failed", message=f"{exc.__class__.__name__}: {exc}"), EXIT_FAILED
    if trainer is not None:
        finished.step = trainer.step
        trainer.stop.uninstall()  # a failed run leaves the signal handlers as it found them too
    reporter.emit(finished)
    reporter.close()
    if code == 0:
        accelerator.wait_for_everyone()
    accelerator.end_training()
    if trainer is not None:
        shutdown_compile_workers(trainer.compiled)
    if accelerator.num_processes > 1:
        # Freeing DDP's reducer tears down the gloo group while its worker thread may still be
        # dropping a finished work item; the worker waits for the GIL the destructor holds and
        # the rank hangs forever. Every rank has passed the last barrier and rank 0 has closed
        # its files, so the process leaves without that teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def leave(code: int) -> NoReturn:
    """End the trainer's process with `code` as soon as the run is over.

    The events and outputs are written and closed, every rank has passed the last
    barrier, and the compiler's workers are gone. What normal interpreter exit would add
    is the teardown of torch, diffusers and transformers: one to three seconds of
    freeing objects one by one, which the operating system does at once, while the
    person (or the GUI) waits for the process to end.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
