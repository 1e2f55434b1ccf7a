"""`studio-train presets [--json]`: the shipped presets and the person's own."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from studio.core.config.errors import ConfigError
from studio.core.exit_codes import EXIT_FAILED, EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser("presets", help="list presets (shipped and your own)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.config.files.presets import list_presets

    try:
        presets = list_presets()
    except ConfigError as exc:
        print(exc.describe(), file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps([p.to_dict() for p in presets], indent=2))
        return EXIT_OK if all(p.valid for p in presets) else EXIT_FAILED
    width = max((len(p.id) for p in presets), default=10)
    print(f"{'ID':<{width}}  {'FAMILY':<6} {'METHOD':<10} {'VRAM':>6}  TITLE")
    for p in presets:
        mark = "" if p.valid else "  [INVALID]"
        mine = "  (yours)" if p.user else ""
        print(f"{p.id:<{width}}  {p.family:<6} {p.method:<10} {p.min_vram_gb:>4g}GB  {p.title}{mine}{mark}")
        for issue in p.issues:
            print(f"{'':<{width}}    - {issue}")
    return EXIT_OK if all(p.valid for p in presets) else EXIT_FAILED
