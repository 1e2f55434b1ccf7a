"""`studio-train validate CONFIG`: check a config file; print it resolved, or its errors."""

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
    parser = sub.add_parser("validate", help="validate a config file and print it resolved")
    parser.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    parser.add_argument("--json", action="store_true", help="print JSON: {valid, config | issues}")
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
    if args.json:
        print(json.dumps({"valid": True, "file": str(path), "config": config.model_dump(mode="json")}, indent=2))
    else:
        print(f"# {path}: valid\n")
        print(dump_resolved(config), end="")
    return EXIT_OK
