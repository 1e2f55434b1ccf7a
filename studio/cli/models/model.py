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
    parser.add_argument("--to-safetensors", action="store_true",
                        help="convert a pickle checkpoint (.ckpt/.pt/.bin) into a .safetensors file beside it, "
                        "reading it as data only (torch's weights-only loader: no code in it runs)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from studio.core.models.files import (
        FAMILY_NAMES,
        ModelFileError,
        detect_model,
        hub_need,
        setting_hub_need,
    )

    path = Path(args.path).expanduser()
    if not path.exists():
        print(f"error: {path} does not exist; give a diffusers model folder or a checkpoint file", file=sys.stderr)
        return EXIT_INVALID
    if args.to_safetensors:
        return _convert(path)
    if path.is_dir() and not (path / "model_index.json").is_file():  # a folder of checkpoints, or a model's part
        files = sorted(p.name for p in path.iterdir() if p.suffix.lower() in (".safetensors", ".ckpt"))
        inside = f"; it holds {', '.join(files[:3])}{', …' if len(files) > 3 else ''}: give one of them" if files \
            else ""
        print(f"error: {path} has no model_index.json, so it is no diffusers model folder: give a diffusers model "
              f"folder (with unet/, vae/, …) or a checkpoint file{inside}", file=sys.stderr)
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
        print(f"  its family is not recognised: {families_read_from_files()}")
    else:
        need, setting = hub_need(info), setting_hub_need(info)
        print(f"  {need}" if need else f"  loads offline; {setting[1]}" if setting else "  loads offline")
    return EXIT_OK if trainable else EXIT_FAILED


def families_read_from_files() -> str:
    """Which families' checkpoint files the studio reads, and which train from a diffusers folder only."""
    from studio.core.families import FAMILIES

    def listed(titles: list[str]) -> str:
        return ", ".join(titles[:-1]) + f" and {titles[-1]}" if len(titles) > 1 else "".join(titles)

    files = [spec.title for spec in FAMILIES if spec.kinds]
    folders = [spec.title for spec in FAMILIES if not spec.kinds]
    return (f"the studio reads checkpoint files of {listed(files)}; {listed(folders)} train from a diffusers "
            "folder (choose the model's folder, or its hub id)")


def _convert(path: Any) -> int:
    """A pickle checkpoint's tensors into `NAME.safetensors` beside it; anything but tensors is refused."""
    from studio.core.config.rules.pickled import is_pickle_file

    if not is_pickle_file(str(path)) or not path.is_file():
        print(f"error: {path} is not a .ckpt, .pt, .pth or .bin file; nothing to convert", file=sys.stderr)
        return EXIT_INVALID
    import os
    import pickle

    import torch
    from safetensors.torch import save_file

    target = path.with_suffix(".safetensors")
    if target.exists():
        print(f"error: {target} exists already; move it away to convert again", file=sys.stderr)
        return EXIT_INVALID
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        print(f"error: {path} holds more than tensors, or is damaged ({first}); it was not converted, and no code "
              "in it ran", file=sys.stderr)
        return EXIT_INVALID
    while isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    tensors = {k: v.detach().clone().contiguous() for k, v in state.items() if isinstance(v, torch.Tensor)} \
        if isinstance(state, dict) else {}
    if not tensors:
        print(f"error: {path} holds no tensors; nothing was written", file=sys.stderr)
        return EXIT_INVALID
    # Written beside it and renamed when whole: a file cut short (Ctrl+C in the minute a 7 GB model takes, a full
    # disk) stayed as NAME.safetensors, refused the next conversion as "exists already" and failed to load.
    part = target.with_name(f"{target.name}.part")
    try:
        save_file(tensors, str(part))
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    print(f"wrote {target} ({len(tensors)} tensors); set model.base to it")
    return EXIT_OK
