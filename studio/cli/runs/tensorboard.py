"""`studio-train tensorboard RUN_DIR...`: TensorBoard files of finished runs, from their events.jsonl."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from studio.core.exit_codes import EXIT_INVALID, EXIT_OK

PROGRESS_EVERY_S = 2.0  # a long export says how far it got this often (a 1 GB file takes minutes)


class _Progress:
    """Lines on stderr while a long events file is read: how much of it, every few seconds, and its end."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.last = time.monotonic()
        self.said = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S and not (done >= total and self.said):
            return  # a short export says nothing; a long one ends with 100%
        self.last, self.said = now, True
        print(f"{self.run_dir}: read {done / max(total, 1):.0%} of its events ({done / 1e6:,.0f} of "
              f"{total / 1e6:,.0f} MB)", file=sys.stderr, flush=True)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "tensorboard", help="write TensorBoard files of runs from their events.jsonl (old runs can be compared)")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders (each with events.jsonl)")
    parser.add_argument("--into", metavar="FOLDER",
                        help="write each run's files to FOLDER/<run name> (default: RUN_DIR/tensorboard)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.tracking.records import MissingLogger
    from studio.core.tracking.tensorboard import export_run

    into = Path(args.into) if args.into else None
    failed = 0
    for name in args.run_dirs:
        run_dir = Path(name)
        try:
            logdir, count = export_run(run_dir, into, _Progress(run_dir))
        except MissingLogger as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INVALID
        except (FileNotFoundError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{run_dir}: {count} records -> {logdir}")
    if failed:
        return EXIT_INVALID
    # The folder that holds every run's files: runs of two projects are found under where their folders meet.
    folder = into if into is not None else Path(os.path.commonpath([Path(d).absolute().parent for d in args.run_dirs]))
    print(f"view them with: tensorboard --logdir {folder}")
    return EXIT_OK
