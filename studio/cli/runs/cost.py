"""`studio-train cost CONFIG`: estimated time and cost of a run on each catalogue GPU type x count."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from studio.core.exit_codes import EXIT_INVALID, EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser("cost", help="estimate time and cost of CONFIG on rented GPUs")
    parser.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    parser.add_argument("--counts", default="1,2,4,8", help="GPU counts per node (default 1,2,4,8)")
    parser.add_argument("--gpu", action="append", metavar="ID", help="only this GPU type (repeatable)")
    parser.add_argument("--catalogue", help="a GPU catalogue TOML (default: yours, else the shipped one)")
    parser.add_argument("--json", action="store_true", help="print JSON: {rows, assumptions}")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.core.config.files.paths import load_resolved
    from studio.core.export.cost import (
        assumptions,
        cost_table,
        format_table,
        vram_estimator,
        workload_from_config,
    )
    from studio.core.export.gpu_catalogue import CatalogueError, load_catalogue

    path = Path(args.config)
    try:
        counts = [int(c) for c in args.counts.split(",") if c.strip()]
    except ValueError:
        print(f"error: --counts {args.counts!r}: give whole numbers separated by commas, e.g. 1,2,4,8", file=sys.stderr)
        return EXIT_INVALID
    if not counts or min(counts) < 1 or args.nodes < 1:  # no GPUs train nothing: there is no time to cost
        print(f"error: --counts {args.counts!r} --nodes {args.nodes}: give GPU counts and a node count of 1 or more, "
              "e.g. --counts 1,2,4,8 --nodes 1", file=sys.stderr)
        return EXIT_INVALID
    try:
        config = load_resolved(path)
        catalogue = load_catalogue(args.catalogue)
        gpu_ids = [catalogue.get(g).id for g in args.gpu] if args.gpu else None
    except (CatalogueError, KeyError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return EXIT_INVALID
    work = workload_from_config(config, config.base_dir)
    try:
        rows = cost_table(work, catalogue, vram_estimator(config), counts, args.nodes, gpu_ids)
        notes = assumptions(catalogue, work)
    except CatalogueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.json:
        print(json.dumps({"rows": [r.to_dict() for r in rows], "assumptions": notes,
                          "currency": catalogue.currency, "catalogue": str(catalogue.source)}, indent=1))
        return EXIT_OK
    print(format_table(rows, catalogue.currency))
    print("\nAssumptions:")
    for note in notes:
        print(f"  - {note}")
    return EXIT_OK
