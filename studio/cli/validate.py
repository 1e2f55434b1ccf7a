"""`studio-train validate CONFIG`: check a config file; print it resolved, or its errors. What `run` would
refuse on this machine (a dataset folder or base model that is not there) is said as warnings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import load_resolved
from studio.core.config.files.toml_file import dump_resolved
from studio.core.dataset.split import split_issue
from studio.core.exit_codes import EXIT_INVALID, EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "validate", help="validate a config file and print it resolved",
        description="Check a config file and print it resolved. Exit code 2: a mistake in the file, each on "
                    "stderr with its key and line; 0: the file is valid. Then what `studio-train run` checks "
                    "before it starts and needs no GPU for (the base model is here, the dataset folders hold "
                    "images, the output folder can be written) is checked on this machine: each problem is a "
                    "warning on stderr, and the exit code stays 0 (the file may be meant for another machine).")
    parser.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON: {valid, config | issues, warnings: what run would say here}")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.config)
    try:
        config = load_resolved(path)
        split = split_issue(config)  # a held-out share of the images there are that leaves none to train on
        if split is not None:
            raise ConfigError(str(path), [split])
    except ConfigError as exc:
        if args.json:
            # A value TOML has and JSON lacks (a date typed where a number goes, inf) is written as JSON writes it.
            issues = [i.model_dump(mode="json") for i in exc.issues]
            print(json.dumps({"valid": False, "file": str(path), "issues": issues}, indent=2))
        else:
            print(exc.describe(), file=sys.stderr)
        return EXIT_INVALID
    # What `run` checks before it starts, less the GPU's, the RAM's and the training environment's: a missing
    # dataset folder or base model is named now, not when a night's queue reaches the run.
    from studio.core.project.preflight import HEADLESS_WARNINGS, preflight

    found = preflight(config, check_torch=False)
    refused = [p for p in found if p.check not in HEADLESS_WARNINGS]
    warnings = [f"{'run would refuse to start: ' if p in refused else ''}{p}" for p in found]
    if args.json:
        print(json.dumps({"valid": True, "file": str(path), "config": config.model_dump(mode="json"),
                          "warnings": warnings}, indent=2))
        return EXIT_OK
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    ready = "" if not refused else ", but `studio-train run` would refuse to start here (see the warnings)"
    print(f"# {path}: valid{ready}\n")
    print(dump_resolved(config), end="")
    return EXIT_OK
