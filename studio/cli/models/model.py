"""`studio-train model PATH`: what a base model is, read from its folder or its checkpoint's header."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "model",
        help="say what a model folder or checkpoint file is, and whether the studio can train from it",
        description="Read a diffusers folder's JSON or a .safetensors file's header (no weights are "
        "loaded) and print its family, its kind and whether it loads without the internet. "
        "Exit code 1 when the studio cannot train from it, 2 when it cannot be read.",
    )
    parser.add_argument("path", metavar="PATH", help="a diffusers model folder or a .safetensors / .ckpt file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from studio.core.models.files import FAMILY_NAMES, ModelFileError, detect_model

    path = Path(args.path).expanduser()
    if not path.exists():
        print(f"error: {path} does not exist; give a diffusers model folder or a checkpoint file", file=sys.stderr)
        return EXIT_INVALID
    try:
        info = detect_model(path)
    except ModelFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    trainable = info.family is not None and info.refused is None
    if args.json:
        print(json.dumps({"path": str(path), **asdict(info), "label": info.label, "offline": info.offline,
                          "refused": info.refused, "trainable": trainable}))
        return EXIT_OK if trainable else EXIT_FAILED
    print(f"{path}: {info.label}")
    if info.family:
        print(f"  family:  {info.family} ({FAMILY_NAMES[info.family]}); use a {info.family} preset")
    print(f"  found by: {info.evidence}")
    if info.refused:
        print(f"  cannot train from it: {info.refused}")
    elif info.family is None:
        print("  its family is not recognised: the studio trains SD1.5, SDXL and SD3 models")
    else:
        print("  loads offline" if info.offline else
              "  its pipeline configs come from the Hugging Face hub: the first run needs the internet")
    return EXIT_OK if trainable else EXIT_FAILED
