"""`studio-train tiny FAMILY DIR`: build a tiny random-weight pipeline offline (tests and the demo)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from studio.cli import EXIT_INVALID, EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser("tiny", help="build a tiny random-weight model folder (no download)")
    parser.add_argument("family", help="model family: sd15 (sdxl and sd3 where this version has them)")
    parser.add_argument("dir", help="folder to write the diffusers pipeline into")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.train.tiny import build_tiny_pipeline

    try:
        folder = build_tiny_pipeline(args.family, args.dir, seed=args.seed)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_INVALID
    print(f"tiny {args.family} pipeline written to {folder}")
    return EXIT_OK
