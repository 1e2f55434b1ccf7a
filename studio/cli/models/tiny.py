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
from studio.core.families import FAMILY_NAMES, family

TINY_STEPS = 2
# The families with an optional T5 text encoder (a setting of their own).
_T5_KEY = "model.use_t5"


def register(sub: Any) -> None:
    parser = sub.add_parser("tiny", help="build a tiny (or full-size) random-weight model folder (no download)")
    parser.add_argument("family", help="model family: " + ", ".join(FAMILY_NAMES))
    parser.add_argument("dir", nargs="?", help="folder to write the diffusers pipeline into")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--t5", action="store_true", help="families with a T5 text encoder: include one (tiny, built locally)")
    with_edit = ", ".join(name for name in FAMILY_NAMES if family(name).edit_model is not None)
    parser.add_argument("--edit", nargs="?", const="edit", choices=("edit", "plus"),
                        help=f"families with edit models of their own ({with_edit}): build the edit model "
                             "(\"plus\": Qwen-Image-Edit Plus, which edits several controls)")
    parser.add_argument("--full-size", action="store_true",
                        help="the real architecture: print its parameter counts (meta device, no memory)")
    parser.add_argument("--write", action="store_true",
                        help="with --full-size: also write the pipeline to DIR (several GB of random weights)")
    parser.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp16",
                        help="with --full-size --write: precision of the written weights")
    parser.add_argument("--force", action="store_true",
                        help="write into DIR even when it holds files the studio did not write (they may be replaced)")
    sizes = sorted({size for name in FAMILY_NAMES for size in family(name).size_bases})
    parser.add_argument("--size", choices=sizes or None, help="with --full-size, a family of several sizes "
                        "(" + ", ".join(n for n in FAMILY_NAMES if family(n).size_bases) + "): which one")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.family not in FAMILY_NAMES:
        print(f"unknown family {args.family!r}; choose from {', '.join(FAMILY_NAMES)}", file=sys.stderr)
        return EXIT_INVALID
    if args.t5 and not _has_t5(args.family):
        with_t5 = ", ".join(name for name in FAMILY_NAMES if _has_t5(name))
        print(f"--t5 applies to the families with a T5 text encoder only ({with_t5})", file=sys.stderr)
        return EXIT_INVALID
    if args.edit and (family(args.family).edit_model is None or args.full_size):
        with_edit = ", ".join(name for name in FAMILY_NAMES if family(name).edit_model is not None)
        print(f"--edit builds the tiny edit model of the families that have one of their own ({with_edit}), "
              "not with --full-size", file=sys.stderr)
        return EXIT_INVALID
    if args.dir and (args.write or not args.full_size):
        # Before PyTorch loads (many seconds): a folder in use is named at once.
        from studio.train.pipelines.tiny import FolderInUseError, check_model_folder

        try:
            check_model_folder(args.dir, args.force)
        except FolderInUseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INVALID
    if args.full_size:
        return _full_size(args)
    if not args.dir:
        print("give the folder to write the tiny pipeline into: studio-train tiny FAMILY DIR", file=sys.stderr)
        return EXIT_INVALID
    # The steps, one line each, as the studio's demo banner shows them (the first takes most of the time).
    print(f"step 1 of {TINY_STEPS}: loading PyTorch and diffusers", flush=True)
    from studio.train.pipelines.tiny import build_tiny_pipeline

    print(f"step 2 of {TINY_STEPS}: building and writing the tiny {args.family} pipeline (random weights)",
          flush=True)
    options: dict[str, object] = {"t5": True} if args.t5 else {}
    if args.edit:
        options["edit"] = args.edit
    folder = build_tiny_pipeline(args.family, args.dir, seed=args.seed, force=args.force, **options)
    what = f"{family(args.family).edit_title}{' Plus' if args.edit == 'plus' else ''}" if args.edit else args.family
    print(f"tiny {what} pipeline written to {folder}")
    return EXIT_OK


def _has_t5(name: str) -> bool:
    return family(name).setting(_T5_KEY) is not None


def _full_size(args: argparse.Namespace) -> int:
    from studio.train.pipelines.full_size import parameter_counts, write_full_size_pipeline

    spec = family(args.family)
    size = (args.size or next(iter(spec.size_bases))) if spec.size_bases else None
    what = f"{spec.title} {size.upper()}" if size else spec.title
    with_t5 = _has_t5(args.family) and (args.t5 or not args.write)
    counts = parameter_counts(args.family, size, t5=with_t5)
    bytes_per = 4 if args.dtype == "fp32" else 2
    for name, count in counts.items():
        print(f"{name:16} {count / 1e6:10,.1f} M parameters")
    total = sum(counts.values())
    print(f"{'total':16} {total / 1e6:10,.1f} M parameters, {total * bytes_per / 2**30:.1f} GiB in {args.dtype} "
          f"({what})")
    if not args.write:
        print("nothing written; add --write and a folder to write these random weights")
        return EXIT_OK
    if not args.dir:
        print(f"--write needs the folder to write into: studio-train tiny {args.family} DIR --full-size --write",
              file=sys.stderr)
        return EXIT_INVALID
    from studio.train.pipelines.tiny import prepare_model_folder

    folder = write_full_size_pipeline(args.family, prepare_model_folder(args.dir, args.force), args.dtype,
                                      t5=args.t5, seed=args.seed, size=size)
    print(f"full-size {what} pipeline (random weights) written to {folder}")
    return EXIT_OK
