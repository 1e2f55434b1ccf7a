"""`studio-train demo-project DIR`: the demo project (shapes with captions and a tiny SD1.5 model)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from studio.core.quoting import command_line


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo-project", help="make the demo project: shapes with captions and a tiny model (no download)"
    )
    parser.add_argument("dir", help="the project folder (created; an existing demo keeps its captions and runs)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.project.demo import NotTheDemoError, create_demo_project

    try:
        project = create_demo_project(args.dir, build_model=True)
    except NotTheDemoError as exc:
        print(exc, file=sys.stderr)
        return EXIT_INVALID
    except subprocess.CalledProcessError as exc:
        print(f"building the tiny model failed:\n{exc.stderr}", file=sys.stderr)
        return EXIT_FAILED
    print(f"demo project ready in {project.root}")
    print(f"train it with: {command_line(['studio-train', 'run', str(project.config_path)])}")
    return EXIT_OK
