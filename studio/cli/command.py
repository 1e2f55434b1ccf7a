"""`studio-train command CONFIG`: print the training command without running it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from studio.core.config.files.paths import load_resolved
from studio.core.config.rules.launch_rules import processes_problem
from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from studio.core.runs.launch import (
    RunFolderError,
    build_command,
    format_command,
    planned_run_dir,
    prepare_run,
    training_python,
)


def register(sub: Any) -> None:
    parser = sub.add_parser("command", help="print the accelerate launch command of a config")
    parser.add_argument("config", help="a TrainConfig TOML file")
    parser.add_argument("--processes", type=int, default=None, metavar="N", help="training processes")
    parser.add_argument("--prepare", action="store_true",
                        help="also write the run folder, so the printed command can be run as it is")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.config)
    config = load_resolved(path)
    wrong = processes_problem(config, args.processes)  # as `run` refuses it, not taken for the config's
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return EXIT_INVALID
    if args.prepare:
        try:
            plan = prepare_run(config, num_processes=args.processes)
        except RunFolderError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(format_command(plan.command))
        return EXIT_OK
    run_dir = planned_run_dir(config)
    print(f"# the run folder is written when the run starts (or with --prepare): {run_dir}")
    print(format_command(build_command(run_dir, training_python(config))))
    return EXIT_OK
