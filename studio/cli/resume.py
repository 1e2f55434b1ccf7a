"""`studio-train resume RUN_DIR`: continue a stopped or killed run from its newest checkpoint.

A run that already completed is refused: resuming it would train it again from step 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from studio.cli import EXIT_INVALID
from studio.cli.run import stream_training
from studio.core.config.toml_file import load_config
from studio.core.runs.folders import ACCELERATE_FILE, CONFIG_FILE
from studio.core.runs.launch import build_command, format_command, training_python
from studio.train.entry import EXIT_FAILED, already_completed_message, completed_run


def register(sub: Any) -> None:
    parser = sub.add_parser("resume", help="continue a run from its newest checkpoint")
    parser.add_argument("run_dir", help="the run folder (holding config.toml and checkpoints/)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir).resolve()
    if not (run_dir / CONFIG_FILE).is_file() or not (run_dir / ACCELERATE_FILE).is_file():
        print(f"{run_dir} is not a run folder (it needs {CONFIG_FILE} and {ACCELERATE_FILE})", file=sys.stderr)
        return EXIT_INVALID
    finished = completed_run(run_dir)
    if finished is not None:
        print(already_completed_message(run_dir, finished), file=sys.stderr)
        return EXIT_FAILED
    config = load_config(run_dir / CONFIG_FILE)
    command = build_command(run_dir, training_python(config), resume=True)
    print(f"command: {format_command(command)}", flush=True)
    return stream_training(command, run_dir)
