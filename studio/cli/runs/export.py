"""`studio-train export CONFIG --out DIR`: a bundle that trains the config on a rented multi-GPU machine."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "export", help="write a bundle (folder or zip) that trains CONFIG on a remote GPU machine",
        description="Write a bundle with config, accelerate configs, launch.sh/check.sh, pinned "
                    "requirements, Dockerfile, dataset (or its manifest) and a README for the remote side.",
    )
    parser.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    parser.add_argument("--out", required=True, help="the bundle folder to create (new or empty)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per node (default 1)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    parser.add_argument("--gpu-type", help="GPU type from the catalogue, e.g. h100 or 'RTX 4090' (for the estimate)")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--include-dataset", dest="include_dataset", action="store_true", default=True,
                      help="copy the images and captions into the bundle (default)")
    data.add_argument("--manifest-only", dest="include_dataset", action="store_false",
                      help="write only the dataset's manifest; copy the images separately")
    parser.add_argument("--remote-dataset", metavar="PATH",
                        help="with --manifest-only: the dataset's folder on the remote machine")
    parser.add_argument("--remote-base", metavar="ID_OR_PATH",
                        help="the base model on the remote side: a hub id or a path there")
    parser.add_argument("--include-model", action="store_true",
                        help="copy a local base model (and VAE) into the bundle")
    parser.add_argument("--main-address", default="127.0.0.1",
                        help="address of the rank-0 node written into multi_node.yaml (launch.sh can override)")
    parser.add_argument("--port", type=int, default=29500, help="main process port (default 29500)")
    parser.add_argument("--keep-steps", action="store_true",
                        help="keep max_steps as written instead of scaling it to the process count")
    parser.add_argument("--zip", action="store_true", help="also write DIR.zip")
    add_cloud_options(parser)
    parser.set_defaults(func=run)


def add_cloud_options(parser: Any) -> None:
    """The choices the bundle's SkyPilot task (sky.yaml) reads."""
    parser.add_argument("--spot", action="store_true",
                        help="sky.yaml asks for spot machines (cheaper; a preempted run resumes, with --bucket)")
    parser.add_argument("--bucket", metavar="URL", help="sky.yaml keeps the run folders on this bucket, "
                        "e.g. s3://my-bucket/studio (checkpoints outlive the machine)")
    parser.add_argument("--autostop", type=int, default=10, metavar="MINUTES",
                        help="the cluster ends itself this many idle minutes after the run (default 10)")


def run(args: argparse.Namespace) -> int:
    from studio.core.export.bundle import ExportError, export_bundle
    from studio.core.export.gpu_catalogue import CatalogueError
    from studio.core.export.sky_task import CloudOptions

    if args.remote_dataset and args.include_dataset and "--include-dataset" in sys.argv:
        print("error: --remote-dataset goes with --manifest-only", file=sys.stderr)
        return EXIT_INVALID
    try:
        report = export_bundle(
            args.config, Path(args.out), gpus=args.gpus, nodes=args.nodes, gpu_type=args.gpu_type,
            include_dataset=args.include_dataset and not args.remote_dataset,
            remote_base=args.remote_base, include_model=args.include_model,
            remote_dataset=args.remote_dataset, zip=args.zip, main_address=args.main_address,
            port=args.port, keep_steps=args.keep_steps,
            cloud=CloudOptions(spot=args.spot, bucket=args.bucket, autostop_minutes=args.autostop),
            progress=_say_steps(),
        )
    except (ExportError, CatalogueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as exc:
        print(f"error: could not write the bundle: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(report.summary())
    return EXIT_OK


def _say_steps() -> Callable[[str, int, int], None]:
    """A line on stderr as each step of the export begins: a dataset of thousands of images takes minutes to
    read, copy and zip, and the command said nothing until it was done."""
    said: set[str] = set()

    def report(message: str, done: int, total: int) -> None:
        step, _, what = message.partition(" ")
        if step == "done" or (step in said and step != "model"):
            return
        said.add(step)
        line = {"dataset": f"dataset: {total} files", "zip": f"zip: {total} entries",
                "model": f"model: {what}"}.get(step, message)
        print(f"{line}…", file=sys.stderr, flush=True)

    return report
