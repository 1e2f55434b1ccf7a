"""`studio-train run CONFIG [--processes N]`: prepare a run folder and start `accelerate launch`.

This is exactly what the GUI starts. The trainer writes RUN_DIR/console.log and this command
shows it as it grows (see `_follow`); Ctrl+C or SIGTERM asks the trainer to stop gracefully
(a second one ends it at once), and closing the terminal leaves the training running. The
exit code is the run's: 0 completed or stopped, 1 failed, 2 a config or flag to fix.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from studio.cli._follow import follow_training
from studio.core.config.files.paths import load_resolved
from studio.core.config.rules.launch_rules import processes_problem
from studio.core.estimate.plans.card_fill import filled_for_launch
from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID
from studio.core.project.preflight import preflight_headless
from studio.core.runs.launch import RunFolderError, format_command, prepare_run, python_problem


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="train: prepare a run folder and start accelerate launch")
    parser.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    parser.add_argument("--processes", type=int, default=None, metavar="N",
                        help="training processes (one per GPU; on a CPU, data-parallel processes)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.config)
    config = load_resolved(path)
    wrong = processes_problem(config, args.processes)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return EXIT_INVALID
    problem = python_problem(config)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_INVALID
    if args.processes is not None:  # checked as it will run (one process per GPU)
        config = config.model_copy(update={"launch": config.launch.model_copy(
            update={"num_processes": args.processes})})
    errors, warnings = preflight_headless(config)
    for found in warnings:
        print(f"warning: {found}", file=sys.stderr)
    if errors:
        print("\n".join(f"error: {found}" for found in errors), file=sys.stderr)
        return EXIT_INVALID
    filled = filled_for_launch(config)
    try:
        plan = prepare_run(filled.config, num_processes=args.processes, note=filled.describe())
    except RunFolderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"run folder: {plan.run_dir}", flush=True)
    if plan.note:
        print(plan.note, flush=True)
    print(f"command: {format_command(plan.command)}", flush=True)
    return follow_training(plan.command, plan.run_dir)
