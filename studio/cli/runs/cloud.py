"""`studio-train cloud launch|status|logs|down|pull`: a run on rented GPUs through SkyPilot, in one step.

`launch CONFIG` exports the bundle into the studio's data folder (cloud/), shows SkyPilot's price and
availability answer next to the studio's own cost, and starts the bundle's sky.yaml on a new
cluster (detached); the cluster ends itself after the run (autostop). `logs` follows it, `pull`
brings the run folders back into the project's runs/, `down` ends the cluster at once. The
person's cloud credentials stay in SkyPilot's configuration; the studio stores the cluster's name.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from studio.cli.runs.export import add_cloud_options
from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from studio.core.files import atomic_write_text
from studio.core.user_dirs import data_dir

CLOUD_DIR = "cloud"  # studio.core.cloud.run.LAUNCHES_DIR
# SkyPilot's job statuses of a run that did not succeed.
FAILED_JOBS = ("FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED")
RECORD = "cluster.json"  # studio.core.cloud.run.LAUNCH_RECORD


def register(sub: Any) -> None:
    parser = sub.add_parser("cloud", help="launch, follow, bring back and end a run on a cloud (SkyPilot)",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="cloud_command", metavar="ACTION", required=True)
    launch = commands.add_parser("launch", help="export CONFIG's bundle and start it on the cheapest cloud offer")
    launch.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    launch.add_argument("--gpus", type=int, default=1, help="GPUs per node (default 1)")
    launch.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    launch.add_argument("--gpu-type", help="GPU type from the catalogue (default: any that fits, the cheapest)")
    launch.add_argument("--name", help="the cluster's name (default: from the run's name)")
    launch.add_argument("--yes", action="store_true", help="start without asking (after showing the price)")
    add_cloud_options(launch)
    launch.set_defaults(func=run_launch)
    setup = commands.add_parser("setup", help="install SkyPilot in a cloud environment of the studio's own")
    setup.add_argument("--wheelhouse", type=Path, help="install from this folder of wheels (no network)")
    setup.set_defaults(func=run_setup)
    for name, func, text in (("status", run_status, "the cluster's and the run's state"),
                             ("logs", run_logs, "follow the run's output"),
                             ("down", run_down, "end the cluster now (billing stops; bring results back first)"),
                             ("pull", run_pull, "bring the run folders back into the project's runs/")):
        action = commands.add_parser(name, help=text)
        action.add_argument("cluster", help="the cluster's name, or CONFIG of a project launched before")
        if name == "down":
            action.add_argument("--yes", action="store_true", help="end it without asking (what was not brought back "
                                "is lost with its disk)")
        action.set_defaults(func=func)


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def run_launch(args: argparse.Namespace) -> int:
    from studio.core.cloud.api import CloudError
    from studio.core.cloud.launcher import cloud_api
    from studio.core.cloud.run import (
        export_for_cloud,
        hand_launch_command,
        launch_bundle,
        refuse_if_running,
        write_launch_record,
    )
    from studio.core.export.bundle import ExportError
    from studio.core.export.gpu_catalogue import CatalogueError
    from studio.core.export.sky_task import CloudOptions

    config_path = Path(args.config).resolve()
    try:
        api = cloud_api()
        bundle = export_for_cloud(config_path, args.name, gpus=args.gpus, nodes=args.nodes, gpu_type=args.gpu_type,
                                  include_model=True, cloud=CloudOptions(spot=args.spot, bucket=args.bucket,
                                                                         autostop_minutes=args.autostop))
        cluster = bundle.cluster
        refuse_if_running(api, bundle)
        print(bundle.summary)
        if bundle.per_hour:
            print(bundle.catalogue_price(args.gpus * args.nodes))
        offers = api.offers(bundle.task_file)
        for offer in offers[:3]:
            print(f"SkyPilot's offer: {offer.describe()}")
        if not offers:
            return _fail("no cloud enabled in SkyPilot offers these GPUs now; run `sky check`, or choose another "
                         "--gpu-type")
        if not args.yes:
            answer = _confirm(f"Start {cluster} now? The cluster ends itself {args.autostop} idle minutes after "
                              "the run. [y/N] ")
            if answer is not True:
                print(f"Not started. The bundle is in {bundle.folder}; start it later there with: "
                      f"{hand_launch_command(bundle)}")
                # No terminal to ask in (a script, a scheduler): nothing started is a failure it must see.
                return EXIT_OK if answer is False else _fail("not a terminal, so nothing was asked and nothing "
                                                             "started: pass --yes to start without asking",
                                                             EXIT_INVALID)
        job = launch_bundle(api, bundle)
    except (CloudError, ExportError, CatalogueError) as exc:
        return _fail(str(exc), EXIT_INVALID if not isinstance(exc, CloudError) else EXIT_FAILED)
    print(f"Started {cluster} (job {job}).")
    print(f"  Follow it:        studio-train cloud logs {cluster}")
    print(f"  Bring it back:    studio-train cloud pull {cluster}")
    print(f"  End it now:       studio-train cloud down {cluster}")
    try:
        write_launch_record(bundle, job, config_path)
    except OSError as exc:
        # The cluster runs (and bills) either way: its name and commands are above; only CONFIG no longer finds it.
        return _fail(f"{cluster} started, but its record could not be written ({exc}): follow and end it by its "
                     "name as above (the project's CONFIG does not find it, nor does `cloud pull`)")
    return EXIT_OK


def _confirm(question: str) -> bool | None:
    """The person's answer; None when there is no terminal to ask in."""
    if not sys.stdin or not sys.stdin.isatty():
        return None
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:  # Ctrl-D: no
        print()
        return False


def _record(name: str) -> dict[str, Any] | None:
    """The newest launch record of a cluster name, or of CONFIG's project."""
    found = _record_file(name)
    return found[1] if found else None


def _record_file(name: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest launch record of a cluster name, or of CONFIG's project, and its file."""
    path = Path(name)
    config = str(path.resolve()) if path.is_file() else None
    for record in sorted((data_dir() / CLOUD_DIR).glob(f"*/{RECORD}"), reverse=True):
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if data.get("cluster") == name or (config is not None and data.get("config") == config):
            return record, data
    return None


def _cluster(name: str) -> str:
    record = _record(name)
    return str(record["cluster"]) if record else name


def run_setup(args: argparse.Namespace) -> int:
    from studio.core.cloud.api import CloudError
    from studio.core.cloud.environment import cloud_env_dir, install_cloud_env

    print(f"Installing SkyPilot into {cloud_env_dir()} …", flush=True)
    try:
        python = install_cloud_env(wheelhouse=args.wheelhouse, on_line=lambda line: print(f"  {line}", flush=True))
    except CloudError as exc:
        return _fail(str(exc))
    print(f"SkyPilot is ready ({python}); enable a cloud with: {python.parent / 'sky'} check")
    return EXIT_OK


def run_status(args: argparse.Namespace) -> int:
    from studio.core.cloud.api import CloudError
    from studio.core.cloud.launcher import cloud_api

    launched = _record(args.cluster) is not None
    if not launched and Path(args.cluster).is_file():
        return _fail(f"no launch of '{args.cluster}' is recorded on this machine (name the cluster as `studio-train "
                     "cloud launch` printed it)", EXIT_INVALID)
    try:
        state = cloud_api().state(_cluster(args.cluster))
    except CloudError as exc:
        return _fail(str(exc))
    if state.status == "gone":
        # "cluster gone" and exit 0 read to a script as a cluster that is there; a run's files go with its disk.
        return _fail(f"there is no cluster {state.name}: "
                     + ("it has ended (`studio-train cloud down`, or by itself after its run) and its disk with it: "
                        "what `studio-train cloud pull` had not brought back is gone" if launched else
                        "none was launched under that name from here, or it has ended since")
                     + "; `sky status` lists the clusters there are, `studio-train cloud launch CONFIG` starts a new one")
    print(f"{state.name}: cluster {state.status}" + (f", run {state.job}" if state.job else ""))
    return EXIT_OK


def run_logs(args: argparse.Namespace) -> int:
    from studio.core.cloud.api import CloudError
    from studio.core.cloud.launcher import cloud_api

    cluster = _cluster(args.cluster)
    try:
        api = cloud_api()
        for line in api.logs(cluster):
            print(line, end="" if line.endswith("\n") else "\n", flush=True)
        state = api.state(cluster)
    except CloudError as exc:
        return _fail(str(exc))
    # As `sky logs` does: a script that follows the run learns from the exit status that it failed.
    if state.job in FAILED_JOBS:
        return _fail(f"the run on {cluster} ended {state.job}; its output is above (bring back what it wrote with "
                     f"`studio-train cloud pull {cluster}`)")
    return EXIT_OK


def run_down(args: argparse.Namespace) -> int:
    from studio.core.cloud.api import CloudError
    from studio.core.cloud.launcher import cloud_api

    cluster = _cluster(args.cluster)
    if not args.yes:
        # Its disk goes with it: a LoRA trained there and not brought back is lost, with the hours paid for it.
        record = _record(args.cluster)
        pulled = record.get("pulled_at") if record else None
        kept = (f"its run folders were last brought back here at {time.strftime('%Y-%m-%d %H:%M', time.localtime(pulled))}"
                if isinstance(pulled, (int, float)) else
                f"nothing was brought back here from it: `studio-train cloud pull {cluster}` does that")
        answer = _confirm(f"End {cluster} now? Its disk is deleted with every file on it ({kept}). [y/N] ")
        if answer is None:
            return _fail(f"not a terminal, so nothing was asked and {cluster} still runs (and bills): pass --yes to "
                         "end it without asking", EXIT_INVALID)
        if not answer:
            print(f"{cluster} still runs.")
            return EXIT_OK
    try:
        cloud_api().down(cluster)
    except CloudError as exc:
        return _fail(str(exc))
    print(f"{cluster} is down; its billing has stopped.")
    return EXIT_OK


def run_pull(args: argparse.Namespace) -> int:
    from studio.core.cloud.api import CloudError
    from studio.core.cloud.launcher import cloud_api

    found = _record_file(args.cluster)
    if found is None:
        return _fail(f"no launch of '{args.cluster}' is recorded on this machine (name the cluster as "
                     "`studio-train cloud launch` printed it, or the project's CONFIG)", EXIT_INVALID)
    path, record = found
    try:
        runs = _runs_dir(Path(record["config"]))
        cloud_api().pull(str(record["cluster"]), "runs", runs)
    except CloudError as exc:
        return _fail(str(exc))
    # `cloud down` says when the run folders were last brought back before it deletes the cluster's disk.
    with contextlib.suppress(OSError):
        atomic_write_text(path, json.dumps({**record, "pulled_at": time.time()}, indent=1) + "\n")
    print(f"Brought back into {runs}; open the project's Runs page to see them.")
    return EXIT_OK


def _runs_dir(config_path: Path) -> Path:
    """Where the project's runs are (its output.dir), so the Runs page shows the run brought back; its runs/
    when the config cannot be read now."""
    from studio.core.config.errors import ConfigError
    from studio.core.config.files.paths import load_resolved

    try:
        return Path(load_resolved(config_path).output.dir)
    except (ConfigError, OSError):
        return config_path.parent / "runs"
