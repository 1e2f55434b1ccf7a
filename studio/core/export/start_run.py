"""Prepare a run folder of an exported bundle on the remote machine (called by its launch.sh).

`python -m studio.core.export.start_run CONFIG --processes N --machines M --machine-rank R ...`
writes `<output.dir>/<stamp>-<name>/` (config.toml resolved, accelerate.yaml, command.txt)
through the same `prepare_run` as a local run, and prints the folder on the last line.
Only the main node's folder lands in the bundle's runs/; other nodes use node-runs/,
so runs/ holds exactly the run that rank 0 writes events to.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import load_config, validate_data
from studio.core.runs.launch import prepare_run

NODE_RUNS_DIR = "node-runs"


def prepare_bundle_run(
    config_path: Path,
    processes: int,
    machines: int,
    machine_rank: int,
    main_ip: str,
    port: int,
    cpu: bool = False,
) -> Path:
    data = load_config(config_path).model_dump(mode="json")
    data["launch"].update(
        num_processes=processes, num_machines=machines, machine_rank=machine_rank,
        main_process_ip=main_ip, main_process_port=port,
    )
    if cpu:
        data["launch"]["cpu"] = True
        data["training"]["mixed_precision"] = "no"
    if machine_rank != 0:
        data["output"]["dir"] = str(Path(data["output"]["dir"]).parent / NODE_RUNS_DIR)
    # Validating again checks the launch values together (rank below machines, ...).
    config = validate_data(data, f"{config_path} with the launch settings of this node")
    plan = prepare_run(resolve_paths(config, config_path.resolve().parent))
    return plan.run_dir


def resumable_run(config_path: Path) -> Path | None:
    """The newest run folder of this bundle that stopped before its end with a checkpoint (a preempted
    spot machine's run, when runs/ lives on a bucket), or None."""
    from studio.core.runs.records.outcome import completed_run

    runs = (config_path.resolve().parent / load_config(config_path).output.dir)
    if not runs.is_dir():
        return None
    for run_dir in sorted((p for p in runs.iterdir() if p.is_dir()), reverse=True):
        checkpoints = run_dir / "checkpoints"
        if checkpoints.is_dir() and any(checkpoints.glob("step-*")) and completed_run(run_dir) is None:
            return run_dir
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studio.core.export.start_run", description=__doc__)
    parser.add_argument("config", type=Path)
    parser.add_argument("--processes", type=int, required=True, help="processes in all, on every node")
    parser.add_argument("--machines", type=int, default=1)
    parser.add_argument("--machine-rank", type=int, default=0)
    parser.add_argument("--main-ip", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=29500)
    parser.add_argument("--cpu", action="store_true", help="test mode: train on the CPU")
    parser.add_argument("--resume-newest", action="store_true",
                        help="print resume:RUN_DIR for the newest unfinished run with a checkpoint, if any")
    args = parser.parse_args(argv)
    if args.resume_newest and args.machine_rank == 0:
        previous = resumable_run(args.config)
        if previous is not None:
            print(f"resume:{previous}")
            return 0
    try:
        run_dir = prepare_bundle_run(
            args.config, args.processes, args.machines, args.machine_rank, args.main_ip, args.port, args.cpu
        )
    except ConfigError as exc:
        print(f"error: {exc.describe()}", file=sys.stderr)
        return 2
    print(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
