"""`studio-train check-dataset DIR`: the studio's dataset validation, headless."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check-dataset",
        help="check a dataset folder or a project's dataset for problems",
        description="Check images and captions before training. DIR is an image folder "
        "(kohya N_name folders inside are read) or a project folder with studio.toml. "
        "A project with dataset.masks = \"folder\" has its loss masks checked too (or give --mask-folder). "
        "Edit pairs (a target, its control images, the instruction as caption) are checked with their control "
        "images: a project with dataset.kind = \"edit\", a folder holding a control/ folder or name_control "
        "images, or --control-folder (ai-toolkit's control_path, musubi-tuner's control_directory). "
        "Exit code 1 when errors exist.",
    )
    parser.add_argument("dir", metavar="DIR", help="image folder or project folder")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--resolution", type=int, default=None,
                        help="training resolution to check sizes against (default: the project's, or 512)")
    parser.add_argument("--mask-folder", metavar="MASKS", default=None,
                        help="check the loss masks in this folder too, one named as each image "
                             "(default: the project's dataset.mask_folder when dataset.masks = \"folder\")")
    parser.add_argument("--edit", action="store_true",
                        help="read DIR as edit pairs even when no control image shows where the controls are")
    parser.add_argument("--control-folder", metavar="CONTROLS", action="append", default=[],
                        help="a folder of control images named as the targets (name.png, or name_0.png, "
                             "name_1.png…); give it once per reference. Implies --edit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from studio.core.config.errors import ConfigError
    from studio.core.config.schema import ConceptSection
    from studio.core.dataset.checks import check_concepts
    from studio.core.dataset.edit_pairs.controls import LAYOUT_NAMES, ControlSettings, find_controls
    from studio.core.dataset.edit_pairs.pairs import control_settings
    from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK
    from studio.core.families import DEFAULT_FAMILY
    from studio.core.project.folder import is_project, open_project

    if args.resolution is not None and args.resolution < 1:  # 0 was taken for "not given", a negative passed all
        print(f"error: --resolution {args.resolution}: give the training resolution in pixels, e.g. 1024",
              file=sys.stderr)
        return EXIT_INVALID
    folder = Path(args.dir).expanduser()
    if not folder.is_dir():
        print(f"error: {folder} is not a folder; give the folder holding the images or a project folder",
              file=sys.stderr)
        return EXIT_INVALID
    resolution, family, use_t5 = args.resolution, DEFAULT_FAMILY, False
    masks = Path(args.mask_folder).expanduser() if args.mask_folder else None
    if is_project(folder):
        project = open_project(folder)
        try:
            config = project.load_config()
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INVALID
        concepts, base = list(config.dataset.concepts), project.root
        resolution, family = resolution or config.dataset.resolution, config.model.family
        use_t5 = config.model.use_t5
        if masks is None and config.dataset.masks == "folder" and config.dataset.mask_folder:
            masks = project.resolve(config.dataset.mask_folder)
        controls = control_settings(config.dataset, project.root)
    else:
        concepts, base = [ConceptSection(path=str(folder.resolve()))], None
        controls = None
    if args.control_folder:
        folders = tuple(Path(f).expanduser().resolve() for f in args.control_folder)
        controls = ControlSettings("separate", folders)
    elif controls is None and (args.edit or (not is_project(folder) and find_controls(folder))):
        controls = ControlSettings()
    report = check_concepts(concepts, base, resolution or 512, mask_folder=masks, family_name=family,
                            controls=controls, use_t5=use_t5)
    if args.json:
        print(json.dumps(report.to_json()))  # ASCII: read the same from a pipe in any code page
    else:
        for layout in report.control_layouts:
            print(f"edit pairs: control images from {LAYOUT_NAMES[layout]}")
        for problem in report.problems:
            print(problem)
        print(f"{report.images} images: {len(report.errors)} errors, {len(report.warnings)} warnings")
    return EXIT_FAILED if report.errors else EXIT_OK
