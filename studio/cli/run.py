"""`studio-train run CONFIG [--processes N]`: prepare a run folder and start `accelerate launch`.

This is exactly what the GUI starts. The trainer's output streams to the terminal
and to RUN_DIR/console.log; Ctrl+C or SIGTERM asks the trainer to stop gracefully
(a second one ends it at once). The exit code is the trainer's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from studio.cli import EXIT_INVALID
from studio.core.config.toml_file import load_config
from studio.core.project.preflight import preflight_headless
from studio.core.runs.events import RunFinished, read_events
from studio.core.runs.folders import CONSOLE_FILE, EVENTS_FILE, request_stop
from studio.core.runs.launch import format_command, prepare_run, training_env


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="train: prepare a run folder and start accelerate launch")
    parser.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    parser.add_argument("--processes", type=int, default=None, metavar="N",
                        help="training processes (one per GPU; on a CPU, data-parallel processes)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.config)
    config = load_config(path)
    if args.processes is not None and args.processes < 1:
        print(f"--processes must be at least 1, not {args.processes}", file=sys.stderr)
        return EXIT_INVALID
    errors, warnings = preflight_headless(config, path.resolve().parent)
    for problem in warnings:
        print(f"warning: {problem}", file=sys.stderr)
    if errors:
        print("\n".join(f"error: {problem}" for problem in errors), file=sys.stderr)
        return EXIT_INVALID
    plan = prepare_run(config, path.resolve().parent, num_processes=args.processes)
    print(f"run folder: {plan.run_dir}", flush=True)
    print(f"command: {format_command(plan.command)}", flush=True)
    return stream_training(plan.command, plan.run_dir)


def stream_training(command: list[str], run_dir: Path) -> int:
    """Run the trainer, copying its output to the terminal and console.log; report the outputs.

    The trainer runs in its own process group (on POSIX) and SIGTERM/SIGINT sent to
    this process are forwarded to that whole group: `accelerate launch` does not pass
    them on, and the trainer answers them by saving a checkpoint and stopping. A
    second signal ends the group at once.
    """
    options: dict[str, Any] = {"process_group": 0} if os.name == "posix" else {}
    with open(run_dir / CONSOLE_FILE, "ab") as console:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   env=training_env(), cwd=run_dir, **options)
        forwarder = SignalForwarder(process, run_dir)
        forwarder.install()
        try:
            assert process.stdout is not None
            for chunk in iter(process.stdout.readline, b""):
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                console.write(chunk)
                console.flush()
            code = process.wait()
        finally:
            forwarder.uninstall()
    status = report_outcome(run_dir)
    if forwarder.count == 1 and code != 0 and status == "stopped":
        # The launcher died of the forwarded signal; the trainer it started stopped cleanly.
        return 0
    return code


class SignalForwarder:
    """Passes SIGTERM and SIGINT on to the trainer's process group while it runs."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, process: subprocess.Popen[bytes], run_dir: Path) -> None:
        self.process = process
        self.run_dir = run_dir
        self.count = 0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._forward)

    def uninstall(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            self._send(signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
            print("\nended at once", file=sys.stderr, flush=True)
            return
        request_stop(self.run_dir)  # every rank reads it, wherever the signal does not reach
        self._send(signum)
        print(f"\n{signal.Signals(signum).name}: stopping at the next step (saving a checkpoint); "
              "send it again (Ctrl+C) to end the run at once", file=sys.stderr, flush=True)

    def _send(self, signum: int) -> None:
        try:
            if os.name == "posix":
                os.killpg(self.process.pid, signum)
            else:
                self.process.send_signal(signum)
        except (ProcessLookupError, PermissionError):
            pass  # the trainer already ended


def report_outcome(run_dir: Path) -> str | None:
    """Print what the run left (outputs, how to continue, or why it failed); its final status."""
    events = run_dir / EVENTS_FILE
    finished = [e for e in read_events(events) if isinstance(e, RunFinished)] if events.is_file() else []
    if not finished:
        print(f"the trainer ended without finishing the run; see {run_dir / CONSOLE_FILE}", file=sys.stderr)
        return None
    last = finished[-1]
    if last.status == "completed":
        for output in last.outputs:
            print(f"written: {output}")
    elif last.status == "stopped":
        print(f"stopped at step {last.step}; continue with: studio-train resume {run_dir}")
    else:
        print(f"the run failed: {last.message} (events: {events})", file=sys.stderr)
    return last.status
