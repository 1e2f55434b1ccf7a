"""Send a config to a remote machine and start it there, detached from the SSH session.

`start_remote_run` checks the machine, writes the bundle into a temporary folder, sends
what changed (the bundle into WORKSPACE/<project>/, a local base model into
WORKSPACE/models/, the images straight from their folders, as the manifest lists them),
runs the bundle's check.sh there, then its launch.sh under tmux, screen or
setsid+nohup with a pid file, so a dropped connection does not stop the training. The
run gets a folder in the project's runs/ at once: `remote.json` says where it runs, and
its events arrive there while it trains (see control.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.app_words import command_or_action, in_desktop_app
from studio.core.config.files.paths import load_resolved
from studio.core.containment import OutsideFolderError, contained_path
from studio.core.export.bundle import MANIFEST, export_bundle, is_hub_id
from studio.core.models.hub_token import token_for_a_run_elsewhere
from studio.core.quoting import sh_word
from studio.core.remote.control import RemoteRunRecord, write_record
from studio.core.remote.machines import STATE_DIR, RemoteMachine
from studio.core.remote.probe import MachineReport, probe_machine, require_ready
from studio.core.remote.ssh import SSH_LOST, Completed, RemoteError, SshClient, remote_path
from studio.core.remote.transfer import LocalFile, TransferReport, has_local_rsync, send_files
from studio.core.runs.folders import STOP_FILE

Progress = Callable[[str, int, int], None]
MODELS_DIR = "models"
# Folders of the bundle that the studio owns there: a file it no longer sends is removed.
OWNED = ("dataset/", "src/", "accelerate/", "model/")
LAUNCH_WAIT_S = 120


class StartUncertain(RemoteError):
    """The connection dropped while the run was starting and did not come back: it may be going there."""


@dataclass
class SentBundle:
    """One send: the bundle into WORKSPACE/<project>/ and a local base model into WORKSPACE/models/."""

    bundle_dir: str
    project: str
    report: TransferReport  # paths relative to the workspace
    dataset_files: int
    warnings: list[str] = field(default_factory=list)

    def _inside(self, rels: list[str]) -> list[str]:
        prefix = f"{self.project}/"
        return [rel[len(prefix):] for rel in rels if rel.startswith(prefix)]

    @property
    def bundle_copied(self) -> list[str]:
        return self._inside(self.report.copied)

    @property
    def removed(self) -> list[str]:
        return self._inside(self.report.removed)

    @property
    def model_copied(self) -> list[str]:
        return [rel for rel in self.report.copied if rel.startswith(f"{MODELS_DIR}/")]

    @property
    def images_copied(self) -> int:
        return sum(1 for rel in self.bundle_copied if rel.startswith("dataset/") and rel != MANIFEST)


@dataclass
class RemoteStart:
    record: RemoteRunRecord
    local_dir: Path
    machine: MachineReport
    sent: SentBundle
    check_output: str
    ssh: str  # how the person reaches the machine themselves
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        r, sent = self.record, self.sent
        here = shlex.quote(str(self.local_dir))  # pasted into a shell: a folder named $(...) stays a name
        copied = f"{len(sent.report.copied)} file(s) copied, {sent.report.unchanged} unchanged"
        images = f"{sent.images_copied} of {sent.dataset_files} dataset file(s) copied"
        lines = [
            f"Started on {r.machine} ({r.target}), detached with {r.detach}:",
            f"  run folder there: {r.remote_run_dir}",
            f"  bundle there: {r.bundle_dir} ({copied}; {images})",
            f"  here: {self.local_dir} (events arrive while the studio follows it)",
            "Watch it:",
            f"  in the studio: Runs page, the run marked 'on {r.machine}' (Open follows it live)",
            *([] if in_desktop_app() else [f"  here:          studio-train remote watch {here}"]),
            f"  there:         {self.ssh} tail -f {shlex.quote(r.remote_run_dir + '/console.log')}",
            command_or_action(f"Stop it: studio-train remote stop {here}   (add --kill to end it at once)",
                              "Stop it: Stop on the Runs page"),
            command_or_action(f"Bring it back: studio-train remote pull {here}",
                              "Bring it back: Bring back on the Runs page"),
        ]
        lines += [f"Note: {w}" for w in self.warnings]
        return "\n".join(lines)


def project_folder_name(config_path: Path) -> str:
    """The project's folder there: readable, and distinct for two projects of the same name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", config_path.parent.name).strip("-.") or "project"
    digest = hashlib.sha1(str(config_path.resolve()).encode()).hexdigest()[:6]
    return f"{slug}-{digest}"


def start_remote_run(config_path: str | Path, machine: RemoteMachine, gpus: int = 1, cpu: bool = False,
                     gpu_type: str | None = None, run_check: bool = True,
                     progress: Progress | None = None) -> RemoteStart:
    """Send `config_path`'s run to `machine` and start it; see the module docstring."""
    config_path = Path(config_path).resolve()
    client = SshClient(machine)
    try:
        project = project_folder_name(config_path)
        report = probe_machine(client, project)
        require_ready(report)
        refuse_if_running(report)
        if not cpu and not report.gpus:
            raise RemoteError(f"{machine.name}: {report.gpu_text()}; rent a machine with GPUs, or train on its CPU "
                              "to test the set-up (--cpu)")
        if report.gpus and gpus > len(report.gpus):
            raise RemoteError(f"{machine.name} has {len(report.gpus)} GPU(s), {gpus} asked for; ask for fewer")
        resolved = load_resolved(config_path)
        local_runs = Path(resolved.output.dir)
        sent = send_bundle(client, report, config_path, project, gpus, gpu_type, progress)
        if progress:
            progress(f"checking {machine.name} (check.sh) and starting" if run_check else "starting", 0, 1)
        token = token_for_a_run_elsewhere() if _downloads_from_hub(str(resolved.model.base)) else None
        record, check = launch_detached(client, report, sent.bundle_dir, gpus, cpu, run_check,
                                        hidden_env={"HF_TOKEN": token} if token else None)
    finally:
        client.close()
    local_dir = local_run_folder(local_runs, record, machine)
    local_dir.mkdir(parents=True, exist_ok=True)
    write_record(local_dir, record)
    return RemoteStart(record, local_dir, report, sent, check, machine.ssh_command(), sent.warnings)


def local_run_folder(local_runs: Path, record: RemoteRunRecord, machine: RemoteMachine) -> Path:
    """The run's folder here, named as its folder there: a name the machine's launch.sh printed, so it passes
    the containment gate (`..` would put remote.json in the project's own folder)."""
    name = record.remote_run_dir.rstrip("/").rsplit("/", 1)[-1]
    try:
        folder = contained_path(local_runs, name, f"{machine.name}: the run folder launch.sh named")
    except OutsideFolderError as exc:
        stop = sh_word(f"{record.remote_run_dir}/{STOP_FILE}")
        raise RemoteError(f"{exc}; the run was started there ({record.remote_run_dir}, pid {record.pid}) but the "
                          f"studio cannot follow it: stop it with `{machine.ssh_command()} touch {stop}`") from None
    # A run here of that name already (one trained here, or on another machine, in the same second, or a name the
    # machine chose to match it) keeps its files: this run's record, events and samples go beside it.
    candidate, counter = folder, 2
    while candidate.exists() or candidate.is_symlink():
        candidate = folder.with_name(f"{folder.name}-{counter}")
        counter += 1
    return candidate


def send_bundle(client: SshClient, report: MachineReport, config_path: Path, project: str, gpus: int,
                gpu_type: str | None, progress: Progress | None = None) -> SentBundle:
    """Write the bundle in a temporary folder and make WORKSPACE/<project> there equal to it; a local
    base model goes to WORKSPACE/models/. One comparison and one copy for all (changed files only)."""
    resolved = load_resolved(config_path)
    model_files, remote_base = _model_files(resolved.model.base, report.workspace)
    with tempfile.TemporaryDirectory(prefix="studio-bundle-") as tmp:
        staging = Path(tmp) / "bundle"
        exported = export_bundle(config_path, staging, gpus=gpus, gpu_type=gpu_type, include_dataset=False,
                                 remote_base=remote_base, include_model=True, progress=progress)
        files = [LocalFile(p, f"{project}/{p.relative_to(staging).as_posix()}")
                 for p in sorted(staging.rglob("*")) if p.is_file()]
        data = _dataset_files(staging, exported.dataset_roots, project)
        sent = send_files(client, model_files + files + data, report.workspace, report.rsync and has_local_rsync(),
                          prune=[f"{project}/{folder}" for folder in OWNED], progress=progress)
    return SentBundle(f"{report.workspace}/{project}", project, sent, len(data), exported.warnings)


def _downloads_from_hub(base: str) -> bool:
    """Whether the run there downloads its base model from the hub (a hub id, not a model sent with the bundle)."""
    local = Path(base)
    return not (local.is_absolute() and local.exists()) and is_hub_id(base)


def _model_files(base: str, workspace: str) -> tuple[list[LocalFile], str | None]:
    """A local base model's files and its path there (WORKSPACE/models/<hash>/<name>); none for a hub id."""
    local = Path(base)
    if not local.is_absolute() or not local.exists():
        if is_hub_id(base):
            return [], None
        raise RemoteError(f"the base model {base} is neither on this computer nor a hub id; fix model.base")
    digest = hashlib.sha1(str(local).encode()).hexdigest()[:8]
    rel_root = f"{MODELS_DIR}/{digest}/{local.name}"
    if local.is_file():
        return [LocalFile(local, rel_root)], f"{workspace}/{rel_root}"
    files = [LocalFile(p, f"{rel_root}/{p.relative_to(local).as_posix()}") for p in _folder_files(local)]
    return files, f"{workspace}/{rel_root}"


def _folder_files(folder: Path) -> list[Path]:
    """Every file of a model folder (hidden files and folders left out), in a stable order."""
    found: list[Path] = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(Path(root) / name for name in sorted(names) if not name.startswith("."))
    return found


def _dataset_files(staging: Path, roots: dict[str, Path], project: str) -> list[LocalFile]:
    """The manifest's files, read from their own folders here (`roots`: each folder under the bundle's dataset/
    -> its folder here; no copy), with the manifest's checksums."""
    manifest = json.loads((staging / MANIFEST).read_text(encoding="utf-8"))
    files = []
    for entry in manifest["files"]:
        name, _, rest = entry["path"].partition("/")
        files.append(LocalFile(roots[name] / rest, f"{project}/dataset/{entry['path']}", entry["size"],
                               entry["sha256"]))
    return files


def refuse_if_running(report: MachineReport) -> None:
    """One run per project and machine: a second send would change the files under the first."""
    if report.active_runs:
        raise RemoteError(f"a run of this project is still going on {report.machine}: stop it first (Stop on the "
                          + command_or_action("Train page, or studio-train remote stop RUN_FOLDER)", "Train page)"))


_LAUNCH = r"""
set -e
@@SECRETS@@
cd @@BUNDLE@@
mkdir -p @@STATE@@
rm -f @@PID@@ @@LOG@@ @@STATUS@@
echo $$ > @@STARTER@@
if [ @@CHECK@@ = 1 ]; then
    if env @@ENV@@ ./check.sh @@CHECK_ARGS@@ > @@LOG@@.check 2>&1; then ok=1; else ok=0; fi
    echo "$ok" > @@LOG@@.checked
    sed 's/^/check| /' @@LOG@@.check
    [ "$ok" = 1 ] || exit 5
fi
case @@MODE@@ in
    tmux) tmux -L @@SESSION@@ new-session -d -s @@SESSION@@ @@TMUX_COMMAND@@ ;;
    screen) screen -dmS @@SESSION@@ sh -c @@INNER@@ ;;
    *) if command -v setsid >/dev/null 2>&1; then
           setsid nohup sh -c @@INNER@@ </dev/null >/dev/null 2>&1 &
       else
           nohup sh -c @@INNER@@ </dev/null >/dev/null 2>&1 &
       fi ;;
esac
"""

# Waits for launch.sh to name its run folder. Sent again after a dropped connection (the script above goes
# on there without it: the checks, then the detached start), with @@GONE@@ saying when it will never come.
_WAIT = r"""
cd @@BUNDLE@@
i=0
while [ "$i" -lt @@TRIES@@ ]; do
    if [ -f @@LOG@@ ] && grep -q '^launch.sh: run folder ' @@LOG@@; then
        echo "run_dir=$(grep -m1 '^launch.sh: run folder ' @@LOG@@ | sed 's/^launch.sh: run folder //')"
        echo "pid=$(cat @@PID@@)"
        exit 0
    fi
    if [ -f @@STATUS@@ ]; then echo "exit=$(cat @@STATUS@@)"; tail -n 40 @@LOG@@ >&2; exit 3; fi
    @@GONE@@
    sleep 0.2
    i=$((i + 1))
done
tail -n 40 @@LOG@@ >&2
exit 4
"""
# ... after a dropped connection: the checks failed (nothing started), or the script that starts ended
# before starting anything.
_GONE = r"""if [ "$(cat @@LOG@@.checked 2>/dev/null)" = 0 ]; then sed 's/^/check| /' @@LOG@@.check; exit 5; fi
    if [ ! -f @@PID@@ ] && ! kill -0 "$(cat @@STARTER@@ 2>/dev/null)" 2>/dev/null; then exit 6; fi"""
CHECK_WAIT_S = 900  # check.sh's longest run


def launch_detached(client: SshClient, report: MachineReport, bundle_dir: str, gpus: int, cpu: bool,
                    check: bool = False, hidden_env: Mapping[str, str] | None = None) -> tuple[RemoteRunRecord, str]:
    """Run check.sh there (when asked), then start launch.sh so that it outlives the SSH session.

    One SSH call (and one more after a dropped connection); returns the run's record and check.sh's table.
    A failed check starts nothing. `hidden_env` (the hub token) is exported by the script that starts the run,
    which ssh hands `sh` on stdin: check.sh and launch.sh inherit it, and no file there and no command line
    (what `ps` shows) holds it. Each tmux start has a server of its own, which takes its environment from the
    start (a server already running for another run would keep its own).
    """
    m = client.machine
    token = time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    state = f"{STATE_DIR}/launch-{token}"
    pid, log, status = f"{state}.pid", f"{state}.log", f"{state}.status"
    starter = f"{state}.starter"  # the pid of the script that starts it (see _GONE)
    env = {"PYTHON": m.python, "GPUS_PER_NODE": str(gpus), **({"STUDIO_BUNDLE_CPU": "1"} if cpu else {}), **m.env}
    # The interpreter may be named from the home there (~/venv/bin/python): the shell that starts launch.sh expands it.
    assignments = " ".join(f"{k}={remote_path(v) if k == 'PYTHON' else shlex.quote(v)}" for k, v in env.items())
    inner = (f"echo $$ > {shlex.quote(pid)}; {{ env {assignments} ./launch.sh 2>&1; echo $? > {shlex.quote(status)}; }}"
             f" | tee {shlex.quote(log)}")
    mode = report.detach_mode if m.detach == "auto" else m.detach
    values = {
        "BUNDLE": remote_path(bundle_dir), "STATE": shlex.quote(STATE_DIR), "PID": shlex.quote(pid),
        "LOG": shlex.quote(log), "STATUS": shlex.quote(status), "STARTER": shlex.quote(starter), "MODE": sh_word(mode), "SESSION": f"studio-{token}",
        "INNER": shlex.quote(inner), "TMUX_COMMAND": shlex.quote(f"sh -c {shlex.quote(inner)}"),
        # check.sh sees what launch.sh will (HF_HOME, where a hub login's token is, from the machine's env).
        "TRIES": str(LAUNCH_WAIT_S * 5), "CHECK": "1" if check else "0", "ENV": assignments,
        "CHECK_ARGS": f"--gpus {gpus}" + (" --allow-no-gpu" if cpu else ""),
        "SECRETS": "".join(f"export {name}={shlex.quote(value)}\n" for name, value in (hidden_env or {}).items()),
    }

    def filled(script: str, **more: str) -> str:
        for key, value in {**values, **more}.items():
            script = script.replace(f"@@{key}@@", value)
        return script

    done = client.run(filled(_LAUNCH + _WAIT, GONE=""), "starting the run", timeout_s=LAUNCH_WAIT_S + CHECK_WAIT_S,
                      check=False)
    if done.code == SSH_LOST:
        # The start goes on there without the connection (the run is detached): ask again once connected.
        lost = client.explain(done.stderr, "starting the run")
        try:
            done = client.run(filled(_WAIT, GONE=filled(_GONE), TRIES=str((LAUNCH_WAIT_S + CHECK_WAIT_S) * 5)),
                              "asking whether the run started", timeout_s=LAUNCH_WAIT_S + CHECK_WAIT_S + 60,
                              check=False)
        except RemoteError:
            done = Completed(SSH_LOST, "", "")
        if done.code == SSH_LOST:
            raise StartUncertain(f"{lost}. The connection dropped while the run was starting: it may be going "
                                 "there all the same; its launcher's log says: "
                                 f"{m.ssh_command()} cat {sh_word(f'{bundle_dir}/{log}')}") from None
        if done.code == 6:
            raise RemoteError(f"{lost}; nothing was started")
    check_lines = [line[7:] for line in done.stdout.splitlines() if line.startswith("check| ")]
    answers = dict(line.partition("=")[::2] for line in done.stdout.splitlines()
                   if "=" in line and not line.startswith("check| "))
    if done.code == 5:
        failed = [line for line in check_lines if " FAIL " in line] or check_lines[-5:]
        raise RemoteError(f"check.sh failed on {m.name}; nothing was started:\n" + "\n".join(failed))
    if done.code != 0 or "run_dir" not in answers:
        why = f"launch.sh exited with status {answers['exit']}" if "exit" in answers else "no run folder appeared"
        raise RemoteError(f"the run did not start on {m.name}: {why}; its last words:\n{done.stderr.strip()}")
    record = RemoteRunRecord(
        machine=m.name, target=m.describe(), bundle_dir=bundle_dir, remote_run_dir=answers["run_dir"].strip(),
        pid_file=f"{bundle_dir}/{pid}", status_file=f"{bundle_dir}/{status}", launch_log=f"{bundle_dir}/{log}",
        detach=mode, copy_tool="rsync" if report.rsync and has_local_rsync() else "sftp",
        pid=int(answers.get("pid", "0").strip() or 0), started=time.time(),
    )
    return record, "\n".join(check_lines)
