"""`studio-train resume RUN_DIR`: continue a stopped or killed run from its newest checkpoint.

Refused, with what to do instead: a run that already completed (resuming it would train it
again from step 0), a run another trainer is training now (its lock), a run imported from
another machine (its paths are that machine's), and a disk with too little room for what the
run still writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from studio.cli._follow import follow_training
from studio.core.config.files.paths import load_resolved, moved_with_its_run
from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID
from studio.core.project.preflight import check_resume_disk
from studio.core.runs.folders import ACCELERATE_FILE, CLOUD_FILE, CONFIG_FILE, REMOTE_FILE
from studio.core.runs.launch import (
    build_command,
    format_command,
    launch_as_configured,
    python_problem,
    training_python,
)
from studio.core.runs.records.outcome import already_completed_message, completed_run
from studio.core.runs.scheduling.lock import RunLockedError, lock_holder, process_file_alive
from studio.core.tracking.tensorboard import check_log_folder


def register(sub: Any) -> None:
    parser = sub.add_parser("resume", help="continue a run from its newest checkpoint")
    parser.add_argument("run_dir", help="the run folder (holding config.toml and checkpoints/)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir).resolve()
    if not (run_dir / CONFIG_FILE).is_file() or not (run_dir / ACCELERATE_FILE).is_file():
        print(f"{run_dir} is not a run folder (it needs {CONFIG_FILE} and {ACCELERATE_FILE})", file=sys.stderr)
        return EXIT_INVALID
    refusal = _refusal(run_dir)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return EXIT_FAILED
    config, _ = moved_with_its_run(load_resolved(run_dir / CONFIG_FILE), run_dir)  # the trainer says it
    problem = python_problem(config)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID
    no_room = check_resume_disk(config, run_dir) or check_log_folder(config, run_dir)
    if no_room:
        print(f"error: {no_room}", file=sys.stderr)
        return EXIT_FAILED
    try:
        relaunched = launch_as_configured(config, run_dir)
    except (OSError, ValueError) as exc:
        print(f"error: {run_dir / ACCELERATE_FILE} cannot be made from {CONFIG_FILE}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if relaunched:
        print(f"{ACCELERATE_FILE} made again from {CONFIG_FILE}'s [launch] edited since: {', '.join(relaunched)}",
              flush=True)
    command = build_command(run_dir, training_python(config), resume=True)
    print(f"command: {format_command(command)}", flush=True)
    return follow_training(command, run_dir)


def _refusal(run_dir: Path) -> str | None:
    """Why this run folder must not be resumed from here, or None."""
    finished = completed_run(run_dir)
    if finished is not None:
        return already_completed_message(run_dir, finished)
    holder = lock_holder(run_dir)
    if holder is not None:
        return str(RunLockedError(run_dir, holder))
    if process_file_alive(run_dir):  # started a moment ago; its trainer has not taken the lock yet
        return f"{run_dir.name} is being started by another studio-train or the studio; wait for it or stop it"
    if (run_dir / CLOUD_FILE).exists():
        return (f"{run_dir.name} trained on a cloud cluster ({CLOUD_FILE}): its config names the cluster's paths; "
                "launch it on a cloud again, or train it here from the project's config")
    if (run_dir / REMOTE_FILE).exists():
        return (f"{run_dir.name} was imported from another machine ({REMOTE_FILE}): its config names that "
                "machine's paths; resume it there with its bundle, or, if you copied it here to continue "
                f"it on this machine, delete {run_dir / REMOTE_FILE} first")
    return None
