"""`studio-train models`: the base models on this machine (and those the studio can download)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from studio.core.exit_codes import EXIT_INVALID, EXIT_OK


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "models", help="list the base models on this machine (A1111, Forge, ComfyUI, Stability Matrix, "
                       "the Hugging Face cache, your folders)",
        description="Find checkpoint files and diffusers folders where people keep them and say what each is "
        "(read from its header: no weights are loaded). --known lists the models the studio can download.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per line")
    parser.add_argument("--known", action="store_true", help="list the models `studio-train download` fetches")
    parser.add_argument("--add", metavar="FOLDER", help="also search this folder from now on")
    parser.add_argument("--remove", metavar="FOLDER", help="stop searching a folder added before")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.models import library

    if args.add or args.remove:
        folders = library.saved_folders()
        if args.add:
            folder = Path(args.add).expanduser().absolute()
            if not folder.is_dir():
                print(f"error: {folder} is not a folder; give the folder that holds your checkpoints",
                      file=sys.stderr)
                return EXIT_INVALID
            folders.append(folder)
        if args.remove:
            gone = Path(args.remove).expanduser().absolute()
            if gone not in [Path(f).absolute() for f in folders]:
                listed = ", ".join(map(str, folders)) or "none"
                print(f"error: {gone} is not among the folders you added ({listed}); nothing was removed",
                      file=sys.stderr)
                return EXIT_INVALID
            folders = [f for f in folders if Path(f).absolute() != gone]
        library.save_added_folders(folders)
    if args.known:
        return _known(args.json)
    models = library.scan_library()
    for model in models:
        if args.json:
            print(json.dumps(model.as_dict()))
        else:
            size = f"{model.size_bytes / 1e9:5.1f} GB"
            state = "" if model.trainable else f"  [cannot train: {model.problem or 'unknown family'}]"
            print(f"{(model.family or '?'):5}  {size}  {model.label:38}  {model.base}  ({model.place}){state}")
    if not models and not args.json:
        places = ", ".join(str(p.folder) for p in library.model_places())
        print(f"no models found in: {places}. Add a folder with --add, or download one (studio-train models --known)")
    return EXIT_OK


def _known(as_json: bool) -> int:
    from studio.core.models.hub_cache import cached_snapshot, missing_components
    from studio.core.models.known import known_models

    for model in known_models():
        snapshot = cached_snapshot(model.id)
        ready = snapshot is not None and not missing_components(snapshot)
        if as_json:
            print(json.dumps({"id": model.id, "title": model.title, "family": model.family, "size_gb": model.size_gb,
                              "gated": model.gated, "license": model.license, "default": model.default,
                              "downloaded": ready}))
        else:
            marks = ", ".join(m for m in ("default" if model.default else "", "gated" if model.gated else "") if m)
            print(f"{model.family:5}  {model.size_gb:5.1f} GB  {'downloaded' if ready else 'not downloaded':15}"
                  f"{model.id}  {model.title}{f' ({marks})' if marks else ''}")
    return EXIT_OK
