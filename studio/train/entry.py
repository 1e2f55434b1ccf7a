"""`python -m studio.train CONFIG.toml | --resume RUN_DIR`: one rank's whole life, errors included.

Every failure a person can act on ends as an `error` event (kind, message, hint)
followed by `run_finished: failed`, and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import load_resolved, moved_with_its_run
from studio.core.config.files.toml_file import load_config
from studio.core.config.schema import TrainConfig
from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID
from studio.core.runs.events import Error, EventWriter, RunFinished
from studio.core.runs.folders import ACCELERATE_FILE, CONFIG_FILE, CONSOLE_FILE, EVENTS_FILE
from studio.core.runs.records.outcome import already_completed_message, completed_run
from studio.core.runs.scheduling.lock import RunLock, RunLockedError, lock_holder

if TYPE_CHECKING:
    from studio.train.errors import TrainError
    from studio.train.progress.reporting import Reporter


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

    plan = prepare_run(load_resolved(path))
    return load_resolved(plan.run_dir / CONFIG_FILE), plan.run_dir, False


def _config_failure(exc: ConfigError, args: argparse.Namespace) -> int:
    if not exc.issues:
        message = f"{exc.source} is not a prepared run folder's config; several processes cannot share it"
        hint = "start the run with `studio-train run CONFIG --processes N`, which prepares the folder"
    else:
        message, hint = exc.describe(), "fix the keys named above"
    folder = Path(args.resume) if args.resume else Path(args.config).parent
    if _rank_zero() and (folder / ACCELERATE_FILE).is_file():
        # The record first: the print below may meet a terminal that is already gone.
        try:
            with EventWriter(folder / EVENTS_FILE) as writer:
                writer.write(Error(kind="config", message=message, hint=hint, path=exc.source))
                writer.write(RunFinished(status="failed", message=message))
        except OSError as write_error:
            message += f" (and {folder / EVENTS_FILE} cannot be written: {write_error})"
    print(f"error (config): {message}\n  hint: {hint}", file=sys.stderr)
    return EXIT_INVALID


def _rank_zero() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


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
    from studio.train.progress.console import is_console, own_console

    holder = lock_holder(run_dir) if _rank_zero() else None
    if holder is not None:
        # Refused before this process touches the folder: the console.log there is the live run's.
        if not is_console(2, run_dir / CONSOLE_FILE):
            print(f"error: {RunLockedError(run_dir, holder)}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    own_console(run_dir)
    return train(config, run_dir, resume)


def _quiet_libraries() -> None:
    """Progress bars of model loading would drown the trainer's own lines in console.log."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()
    # bitsandbytes (imported by peft and model.quantized_base) notes on import that an optional CPU kernel
    # package is missing; the studio does not use that kernel.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


def train(config: TrainConfig, run_dir: Path, resume: bool = False) -> int:
    """Run (or resume) the training of `config` in `run_dir` on this rank; the exit code.

    Rank 0 holds the run folder's lock throughout: a second trainer of the same folder is
    refused before it writes anything there.
    """
    lock = RunLock(run_dir)
    if _rank_zero():
        try:
            lock.acquire()
        except (RunLockedError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return EXIT_FAILED
    try:
        # `_held` keeps the trainer and its accelerator alive until the process leaves (below).
        code, processes, _held = _train(config, run_dir, resume)
    finally:
        lock.release()
    if processes > 1:
        # Freeing DDP's reducer tears down the gloo group while its worker thread may still be
        # dropping a finished work item; the worker waits for the GIL the destructor holds and
        # the rank hangs forever. Every rank has passed the last barrier and rank 0 has closed
        # its files, so the process leaves without that teardown: nothing of the run is freed
        # before (`_held` is still referenced here).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _train(config: TrainConfig, run_dir: Path, resume: bool) -> tuple[int, int, tuple[object, object]]:
    """(exit code, process count, (trainer, accelerator)) of this rank's training; every failure
    ends as an error event."""
    import torch

    from studio.train.compilation import shutdown_compile_workers
    from studio.train.errors import TrainError, oom_hint, vram_estimate_text, write_failure
    from studio.train.progress.phase_clock import run_times
    from studio.train.progress.reporting import Reporter
    from studio.train.runtime import make_accelerator

    _quiet_libraries()
    moved = ""
    if resume:  # a run folder moved with its project finds its dataset and model where they are now
        config, moved = moved_with_its_run(config, run_dir)
    accelerator = make_accelerator(config)
    reporter = Reporter(run_dir, accelerator.is_main_process, rank=accelerator.process_index)
    if moved:
        reporter.warn(moved)
    code = 0
    trainer = None
    try:
        from studio.train.extras.logs import attach_loggers
        from studio.train.loop import Trainer
        from studio.train.memory.cap import apply_gpu_cap

        attach_loggers(reporter, config, run_dir)
        if config.model.quantized_base == "nf4":
            from studio.train.memory.quantized import bitsandbytes

            bitsandbytes()  # a missing library is refused before the model loads, with the words that install it
        apply_gpu_cap(accelerator.device, reporter.warn)
        trainer = Trainer(config, run_dir, accelerator, reporter, resume=resume)
        finished = trainer.run()
    except torch.OutOfMemoryError as exc:
        t = config.training
        reporter.error("oom", f"the GPU ran out of memory: {str(exc).splitlines()[0]}",
                       oom_hint(t.batch_size, config.dataset.resolution, t.gradient_checkpointing,
                                vram_estimate_text(config, run_dir)))
        finished, code = RunFinished(status="failed", message="out of memory"), EXIT_FAILED
    except TrainError as exc:
        finished, code = _failed(reporter, exc), EXIT_FAILED
    except Exception as exc:  # the process boundary: a full disk, or a crash reported with its traceback
        filename = getattr(exc, "filename", None)
        where = Path(filename).parent if isinstance(filename, str) else run_dir
        failure = write_failure(exc, where, None, filename or "a file")
        finished = _failed(reporter, failure) if failure is not None else _crashed(reporter, exc)
        code = EXIT_FAILED
    if trainer is not None:
        finished.step = trainer.step
        finished.phases, finished.images_per_s = run_times(trainer)
        finished.skipped_steps = trainer.skipped.count
        trainer.stop.uninstall()  # a failed run leaves the signal handlers as it found them too
    reporter.emit(finished)
    reporter.close()
    if code == 0:
        accelerator.wait_for_everyone()
    accelerator.end_training()
    if trainer is not None:
        shutdown_compile_workers(trainer.compiled)
    return code, accelerator.num_processes, (trainer, accelerator)


def _failed(reporter: Reporter, exc: TrainError) -> RunFinished:
    reporter.emit(Error(kind=exc.kind, message=exc.message, hint=exc.hint, path=exc.path,
                        needed_bytes=exc.needed_bytes))
    return RunFinished(status="failed", message=exc.message)


def _crashed(reporter: Reporter, exc: BaseException) -> RunFinished:
    reporter.crash(exc)
    return RunFinished(status="failed", message=f"{exc.__class__.__name__}: {exc}")


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
