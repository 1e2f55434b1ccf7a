"""`studio-train tiny FAMILY DIR`: build a tiny random-weight pipeline offline (tests and the demo).

`--full-size` works on the real architectures instead (random weights, published
configurations): it prints their parameter counts, and writes a loadable folder of
several GB only with `--write`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from studio.core.exit_codes import EXIT_INVALID, EXIT_OK

FAMILIES = ("sd15", "sdxl", "sd3", "flux2-klein")


def register(sub: Any) -> None:
    parser = sub.add_parser("tiny", help="build a tiny (or full-size) random-weight model folder (no download)")
    parser.add_argument("family", help="model family: sd15, sdxl, sd3 or flux2-klein")
    parser.add_argument("dir", nargs="?", help="folder to write the diffusers pipeline into")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--t5", action="store_true", help="sd3: include a T5 text encoder (tiny, built locally)")
    parser.add_argument("--size", choices=("4b", "9b"), default="4b",
                        help="flux2-klein with --full-size: which of its two architectures")
    parser.add_argument("--full-size", action="store_true",
                        help="the real architecture: print its parameter counts (meta device, no memory)")
    parser.add_argument("--write", action="store_true",
                        help="with --full-size: also write the pipeline to DIR (several GB of random weights)")
    parser.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp16",
                        help="with --full-size --write: precision of the written weights")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.family not in FAMILIES:
        print(f"unknown family {args.family!r}; choose from {', '.join(FAMILIES)}", file=sys.stderr)
        return EXIT_INVALID
    if args.t5 and args.family != "sd3":
        print("--t5 applies to the sd3 family only", file=sys.stderr)
        return EXIT_INVALID
    if args.full_size:
        return _full_size(args)
    if not args.dir:
        print("give the folder to write the tiny pipeline into: studio-train tiny FAMILY DIR", file=sys.stderr)
        return EXIT_INVALID
    from studio.train.pipelines.tiny import build_tiny_pipeline

    options = {"t5": True} if args.t5 else {}
    folder = build_tiny_pipeline(args.family, args.dir, seed=args.seed, **options)
    print(f"tiny {args.family} pipeline written to {folder}")
    return EXIT_OK


def _full_size(args: argparse.Namespace) -> int:
    from studio.train.pipelines.full_size import parameter_counts, write_full_size_pipeline

    with_t5 = args.family == "sd3" and (args.t5 or not args.write)
    if args.family == "flux2-klein":
        from studio.train.pipelines.flux2_klein import full_size_main

        return full_size_main(args)
    counts = parameter_counts(args.family, t5=with_t5)
    bytes_per = 4 if args.dtype == "fp32" else 2
    for name, count in counts.items():
        print(f"{name:16} {count / 1e6:10,.1f} M parameters")
    total = sum(counts.values())
    print(f"{'total':16} {total / 1e6:10,.1f} M parameters, {total * bytes_per / 2**30:.1f} GiB in {args.dtype}")
    if not args.write:
        print("nothing written; add --write and a folder to write these random weights")
        return EXIT_OK
    if not args.dir:
        print("--write needs the folder to write into: studio-train tiny --full-size --write FAMILY DIR",
              file=sys.stderr)
        return EXIT_INVALID
    folder = write_full_size_pipeline(args.family, args.dir, args.dtype, t5=args.t5, seed=args.seed)
    print(f"full-size {args.family} pipeline (random weights) written to {folder}")
    return EXIT_OK
