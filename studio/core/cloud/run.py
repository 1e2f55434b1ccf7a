"""A run on a cloud cluster followed from the studio: its record here, its files live, Stop, bringing it back.

The run's local folder in the project's runs/ holds `cloud.json` (the cluster's name, the job, the
bundle: never a credential). Its events.jsonl and console.log are mirrors of the files of the
newest run folder in the cluster's `sky_workdir/runs/`, kept by the same `RemoteFileMirror` as an
SSH run's, through the launcher's shell command (SkyPilot: ssh to the cluster's alias). Stop writes
the STOP file there; once the job has ended the run's folder is brought back into the local one
(what the mirrors already hold is kept, only the rest of those files is appended) and the cluster
goes down, so it costs nothing more.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO

from studio.core.app_words import cli_command, command_or_action
from studio.core.cloud.api import CloudApi, CloudError, ClusterState
from studio.core.cloud.hub_access import launch_secrets, refuse_gated_without_token
from studio.core.files import atomic_write_text
from studio.core.remote.tail import RemoteFileMirror, StreamFrom
from studio.core.runs.folders import CLOUD_FILE, CONSOLE_FILE, EVENTS_FILE, STOP_FILE

WORKDIR = "sky_workdir"  # where SkyPilot puts the task's workdir (the bundle) in the cluster's home
PULLED_DIR = "pulled"  # in the bundle's folder here: the cluster's runs/ as it came back
MIRRORED = (EVENTS_FILE, CONSOLE_FILE)

# The newest run folder of the bundle there, with its trailing slash (empty while none exists yet).
_NEWEST = f'd="$(ls -1d {WORKDIR}/runs/*/ 2>/dev/null | tail -n 1)"'


@dataclass
class CloudRunRecord:
    """cloud.json: where a run runs. Names only; SkyPilot keeps the credentials."""

    cluster: str
    job: int
    bundle: str  # the exported bundle here (data folder cloud/<stamp>-<cluster>)
    launched: float
    state: str = "running"  # running | pulled | down
    remote_run: str = ""  # the run folder's name there, once brought back
    job_status: str = ""  # the launcher's last word on the job: SUCCEEDED | FAILED | CANCELLED ...


def write_cloud_record(local_dir: Path, record: CloudRunRecord) -> None:
    atomic_write_text(local_dir / CLOUD_FILE, json.dumps(asdict(record), indent=1) + "\n")


def read_cloud_record(local_dir: Path) -> CloudRunRecord:
    path = local_dir / CLOUD_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CloudError(f"{local_dir} is not a run launched on a cloud (no {CLOUD_FILE})") from None
    except (OSError, ValueError) as exc:
        raise CloudError(f"cannot read {path}: {exc}") from None
    known = {f.name for f in fields(CloudRunRecord)}
    try:
        return CloudRunRecord(**{k: v for k, v in data.items() if k in known})
    except TypeError:
        raise CloudError(f"{path} was not written by a cloud launch of the studio (it names no cluster)") from None


def new_record(cluster: str, job: int, bundle: Path) -> CloudRunRecord:
    return CloudRunRecord(cluster=cluster, job=job, bundle=str(bundle), launched=time.time())


# ------------------------------------------------------------ following the files live
def follow_script(name: str, offset: int) -> str:
    """Wait for the run folder there (setup may take minutes), then send `name` from byte `offset` on."""
    return (f"while :; do {_NEWEST}; [ -n \"$d\" ] && [ -e \"${{d}}{name}\" ] && break; sleep 1; done\n"
            f"exec tail -c +{offset + 1} -F \"${{d}}{name}\" 2>/dev/null\n")


def _stream_from(api: CloudApi, cluster: str, name: str) -> StreamFrom:
    def start(offset: int, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(api.shell(cluster, follow_script(name, offset)), stdout=subprocess.PIPE,
                                stderr=stderr, stdin=subprocess.DEVNULL)

    return start


def follow_cloud_files(api: CloudApi, cluster: str, local_dir: Path) -> dict[str, RemoteFileMirror]:
    """Mirrors of the run's events.jsonl and console.log on the cluster; not started yet."""
    return {
        EVENTS_FILE: RemoteFileMirror(f"{cluster} events", local_dir / EVENTS_FILE,
                                      _stream_from(api, cluster, EVENTS_FILE)),
        CONSOLE_FILE: RemoteFileMirror(f"{cluster} console", local_dir / CONSOLE_FILE,
                                       _stream_from(api, cluster, CONSOLE_FILE), breaks=b"\r\n"),
    }


# ------------------------------------------------------------ what can be done to it
def request_cloud_stop(api: CloudApi, cluster: str, timeout_s: float = 120.0) -> bool:
    """Write the STOP file of the run there (the trainer saves a checkpoint and ends); False when no run
    folder exists there yet (the cluster is still being set up: nothing to save)."""
    script = (f"{_NEWEST}\n[ -n \"$d\" ] || {{ echo none; exit 0; }}\n"
              f"printf 'stop requested\\n' > \"${{d}}{STOP_FILE}\" && echo stopped\n")
    try:
        done = subprocess.run(api.shell(cluster, script), capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CloudError(f"could not ask the run on {cluster} to stop: {exc}") from None
    if done.returncode != 0:
        raise CloudError(f"could not ask the run on {cluster} to stop (exit {done.returncode}): "
                         f"{done.stderr.strip()[-300:]}; end it with Kill (the cluster goes down)")
    return done.stdout.strip().endswith("stopped")


def job_exit_code(state: ClusterState) -> int | None:
    """The run's exit code by the job's status; None when the cluster is gone (nothing is known)."""
    if state.status == "gone":
        return None
    return 0 if state.job == "SUCCEEDED" else 1


class NothingToBringBack(CloudError):
    """The cluster holds no run folder: ending it loses nothing."""


@dataclass
class BroughtBack:
    remote_run: str
    files: int


def bring_back(api: CloudApi, record: CloudRunRecord, local_dir: Path) -> BroughtBack:
    """Copy the cluster's runs/ next to the bundle here, and move its newest run into `local_dir`.

    The mirrored files keep what they hold (the views read them by offset) and get only the bytes
    they lack; every other file replaces the local one. CloudError when nothing came back."""
    staging = Path(record.bundle) / PULLED_DIR
    shutil.rmtree(staging, ignore_errors=True)
    api.pull(record.cluster, "runs", staging)
    runs = sorted(p for p in staging.iterdir() if p.is_dir()) if staging.is_dir() else []
    if not runs:
        raise NothingToBringBack(f"{record.cluster} holds no run folder in {WORKDIR}/runs/ (the run did not start; "
                         f"`sky logs {record.cluster}` shows why)")
    remote = runs[-1]
    count = 0
    for path in sorted(remote.rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(remote)
        target = local_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.as_posix() in MIRRORED and target.exists():
            _append_rest(path, target)
        else:
            shutil.move(str(path), target)
        count += 1
    shutil.rmtree(staging, ignore_errors=True)
    record.state, record.remote_run = "pulled", remote.name
    write_cloud_record(local_dir, record)
    return BroughtBack(remote.name, count)


def _append_rest(full: Path, mirror: Path) -> None:
    have = mirror.stat().st_size
    with open(full, "rb") as source:
        source.seek(have)
        rest = source.read()
    if rest:
        with open(mirror, "ab") as out:
            out.write(rest)


def end_cluster(api: CloudApi, record: CloudRunRecord, local_dir: Path) -> None:
    api.down(record.cluster)
    record.state = "down"
    write_cloud_record(local_dir, record)


def pull_command(record: CloudRunRecord) -> str:
    return cli_command(["cloud", "pull", record.cluster])


# ------------------------------------------------------------ launching
LAUNCHES_DIR = "cloud"  # in the studio's data folder: one exported bundle per launch
LAUNCH_RECORD = "cluster.json"


@dataclass(frozen=True)
class CloudBundle:
    """A bundle exported for one launch: its folder, the cluster's name, and the catalogue's price per hour."""

    folder: Path
    cluster: str
    summary: str
    per_hour: dict[str, object] | None
    hub_base: str | None = None  # the base model's hub id when the cluster downloads it

    @property
    def task_file(self) -> Path:
        from studio.core.export.sky_task import SKY_FILE

        return self.folder / SKY_FILE

    def catalogue_price(self, gpus: int) -> str:
        if not self.per_hour:
            return "The studio's catalogue has no price for these GPUs."
        p = self.per_hour
        return (f"The studio's catalogue: {p['gpu']} x {gpus} about {float(str(p['min'])):.2f}-"
                f"{float(str(p['max'])):.2f} {p['currency']} per hour")


def export_for_cloud(config_path: Path, name: str | None = None, **export_options: object) -> CloudBundle:
    """Export `config_path`'s bundle into the data folder's cloud/<stamp>-<cluster>/ for a launch.

    `export_options` go to `export_bundle` (gpus, nodes, gpu_type, include_model, cloud=CloudOptions...)."""
    import datetime as _dt

    from studio.core.config.files.toml_file import load_config
    from studio.core.export.bundle import export_bundle
    from studio.core.export.sky_task import cluster_name
    from studio.core.user_dirs import data_dir

    cluster = cluster_name(name or load_config(config_path).output.name)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = data_dir() / LAUNCHES_DIR / f"{stamp}-{cluster}"
    # Two exports in one second (a quote asked for again, a script's second launch): each a folder of its own,
    # later ones named after the first so that the newest record still sorts first.
    number = 1
    while folder.exists():
        number += 1
        folder = data_dir() / LAUNCHES_DIR / f"{stamp}-{cluster}-{number}"
    report = export_bundle(config_path, folder, **export_options)  # type: ignore[arg-type]
    info = json.loads((folder / "bundle.json").read_text(encoding="utf-8"))
    hub_base = report.base_model if report.base_kind == "hub" else None
    refuse_gated_without_token(hub_base)
    return CloudBundle(folder, cluster, report.summary(), info["cloud"]["per_hour"], hub_base)


def refuse_if_running(api: CloudApi, bundle: CloudBundle) -> None:
    """CloudError when the bundle's cluster (named after the run) still runs a run launched before: SkyPilot would
    sync this bundle over that run's files as it trains and queue this run behind it, and the end of the first
    would take the cluster down under the second."""
    state = api.state(bundle.cluster)
    if state.running:
        c = bundle.cluster
        raise CloudError(f"{c} is still running a run launched before (cluster {state.status}, job "
                         f"{state.job or 'starting'}); nothing was started. Follow it with "
                         f"{cli_command(['cloud', 'logs', c])}, bring it back with {cli_command(['cloud', 'pull', c])}"
                         f" and end it with {cli_command(['cloud', 'down', c])}, or launch this run on a cluster of "
                         + command_or_action("its own (--name OTHER)", "its own (give it another output name)"))


def hand_launch_command(bundle: CloudBundle) -> str:
    """How the person starts the bundle later with SkyPilot itself (in its folder): with the hub token of their
    shell's HF_TOKEN as a secret when the cluster downloads a gated base (SkyPilot refuses `--secret HF_TOKEN`
    when the shell has no HF_TOKEN, so a public base goes without)."""
    from studio.core.export.sky_task import SKY_FILE
    from studio.core.models.known import known_gated

    gated = bundle.hub_base is not None and known_gated(bundle.hub_base)
    return f"sky launch -c {bundle.cluster} {SKY_FILE}" + (" --secret HF_TOKEN" if gated else "")


def launch_bundle(api: CloudApi, bundle: CloudBundle) -> int:
    """Start the bundle's task on its cluster with the person's hub token when the cluster downloads the base
    (read here, at the launch, and given to the launcher only); the job id."""
    return api.launch(bundle.task_file, bundle.cluster, launch_secrets(bundle.hub_base))


def write_launch_record(bundle: CloudBundle, job: int, config_path: Path) -> None:
    """The bundle's cluster.json: `studio-train cloud status|logs|pull|down` find the cluster by it."""
    import datetime as _dt

    record = {"cluster": bundle.cluster, "job": job, "bundle": str(bundle.folder), "config": str(config_path),
              "launched": _dt.datetime.now().isoformat(timespec="seconds")}
    atomic_write_text(bundle.folder / LAUNCH_RECORD, json.dumps(record, indent=1) + "\n")
