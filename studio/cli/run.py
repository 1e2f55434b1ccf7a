"""`studio-train run CONFIG [--processes N]`: prepare a run folder and start `accelerate launch`.

This is exactly what the GUI starts. The trainer's output streams to the terminal
and to RUN_DIR/console.log; Ctrl+C asks the trainer to stop gracefully (a second
Ctrl+C ends it at once). The exit code is the trainer's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

from studio.cli import EXIT_INVALID
from studio.core.config import ConfigError, load_config
from studio.core.events import RunFinished, read_events
from studio.core.launch import format_command, prepare_run, training_env
from studio.core.runs import CONSOLE_FILE, EVENTS_FILE, request_stop


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="train: prepare a run folder and start accelerate launch")
    parser.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    parser.add_argument("--processes", type=int, default=None, metavar="N",
                        help="training processes (one per GPU; on a CPU, data-parallel processes)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.config)
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc.describe(), file=sys.stderr)
        return EXIT_INVALID
    if args.processes is not None and args.processes < 1:
        print(f"--processes must be at least 1, not {args.processes}", file=sys.stderr)
        return EXIT_INVALID
    plan = prepare_run(config, path.resolve().parent, num_processes=args.processes)
    print(f"run folder: {plan.run_dir}", flush=True)
    print(f"command: {format_command(plan.command)}", flush=True)
    return stream_training(plan.command, plan.run_dir)


def stream_training(command: list[str], run_dir: Path) -> int:
    """Run the trainer, copying its output to the terminal and console.log; report the outputs."""
    with open(run_dir / CONSOLE_FILE, "ab") as console:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   env=training_env(), cwd=run_dir)
        assert process.stdout is not None
        stopping = False
        while True:
            try:
                chunk = process.stdout.readline()
                if not chunk:
                    break
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                console.write(chunk)
                console.flush()
            except KeyboardInterrupt:
                if stopping:
                    process.kill()
                    break
                stopping = True
                request_stop(run_dir)
                print("\nstopping at the next step (saving a checkpoint); Ctrl+C again to end it now",
                      file=sys.stderr, flush=True)
        code = process.wait()
    report_outcome(run_dir)
    return code


def report_outcome(run_dir: Path) -> None:
    events = run_dir / EVENTS_FILE
    finished = [e for e in read_events(events) if isinstance(e, RunFinished)] if events.is_file() else []
    if not finished:
        print(f"the trainer ended without finishing the run; see {run_dir / CONSOLE_FILE}", file=sys.stderr)
        return
    last = finished[-1]
    if last.status == "completed":
        for output in last.outputs:
            print(f"written: {output}")
    elif last.status == "stopped":
        print(f"stopped at step {last.step}; continue with: studio-train resume {run_dir}")
    else:
        print(f"the run failed: {last.message} (events: {events})", file=sys.stderr)
