"""`studio-train demo-data DIR`: write the demo dataset (coloured shapes with captions)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from studio.core.exit_codes import EXIT_INVALID, EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser("demo-data", help="write the demo dataset: shapes with captions")
    parser.add_argument("dir", help="folder to write the images and .txt captions into")
    parser.add_argument("--count", type=int, default=24, help="number of images (default 24)")
    parser.add_argument("--size", type=int, default=128, help="image side in pixels (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="seed (the same seed writes the same files)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.dataset.demo_shapes import write_demo_dataset

    try:
        written = write_demo_dataset(args.dir, count=args.count, size=args.size, seed=args.seed)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_INVALID
    print(f"{len(written)} images with captions written to {args.dir}")
    return EXIT_OK
