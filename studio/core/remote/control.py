"""A run started on a remote machine: its record here, and what can be done to it from here.

The run's local folder (in the project's runs/) holds `remote.json`, the record of where
it runs; its events.jsonl and console.log are mirrors of the files there, kept by
`follow_files`; samples are fetched before their event is appended, so the Train page
never shows a sample that is not on disk. Stop writes the STOP file there (the trainer
saves a checkpoint and ends), Kill ends the process tree, Pull brings the run folder
back (resumably).
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO

from studio.core.containment import OutsideFolderError, contained_path
from studio.core.files import atomic_write_text
from studio.core.remote.machines import get_machine
from studio.core.remote.ssh import RemoteError, SshClient, remote_path
from studio.core.remote.tail import RemoteFileMirror, StreamFrom
from studio.core.remote.transfer import TransferReport, fetch_files, pull_folder, skipped, uncarried
from studio.core.runs.folders import (
    CHECKPOINTS_DIR,
    CLOUD_FILE,
    CONSOLE_FILE,
    EVENTS_FILE,
    PROCESS_FILE,
    REMOTE_FILE,
    STOP_FILE,
)

log = logging.getLogger(__name__)

SAMPLE_TRIES = 3
# The studio's records in the run folder here, never replaced by a file of the machine's: remote.json names the
# machine and the process that Stop, Kill and Pull reach; process.json a process of this computer.
OWN_RECORDS = (REMOTE_FILE, CLOUD_FILE, PROCESS_FILE)
Progress = Callable[[str, int, int], None]


@dataclass
class RemoteRunRecord:
    """remote.json: where a run runs. Host and paths only; never a key, a password or a token."""

    machine: str
    target: str
    bundle_dir: str
    remote_run_dir: str
    pid_file: str
    status_file: str
    launch_log: str
    detach: str
    copy_tool: str  # rsync | sftp
    pid: int
    started: float
    state: str = "running"  # running | ended | pulled
    exit_status: int | None = None

    @property
    def source(self) -> str:
        return f"{self.machine}:{self.remote_run_dir}"


def write_record(local_dir: Path, record: RemoteRunRecord) -> None:
    data = {**asdict(record), "source": record.source}
    atomic_write_text(local_dir / REMOTE_FILE, json.dumps(data, indent=1) + "\n")


def read_record(local_dir: str | Path) -> RemoteRunRecord:
    path = Path(local_dir) / REMOTE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RemoteError(f"{Path(local_dir)} is not a run started on a remote machine (no {REMOTE_FILE})") from None
    except (OSError, ValueError) as exc:
        raise RemoteError(f"cannot read {path}: {exc}") from None
    known = {f.name for f in fields(RemoteRunRecord)}
    try:
        return RemoteRunRecord(**{k: v for k, v in data.items() if k in known})
    except TypeError:
        raise RemoteError(f"{path} was not written by a remote start of the studio (it names no machine)") from None


def client_for(record: RemoteRunRecord) -> SshClient:
    return SshClient(get_machine(record.machine))


def request_remote_stop(client: SshClient, record: RemoteRunRecord) -> None:
    """Ask the trainer there to stop at its next step (it saves a checkpoint and says run_finished)."""
    stop = remote_path(f"{record.remote_run_dir}/{STOP_FILE}")
    client.run(f"printf 'stop requested\\n' > {stop}\n", "asking the run to stop", timeout_s=60)


# Runs there: is the launcher alive, and its exit status once it is not.
_STATE = r"""
import json, os, sys
job = json.loads(JOB)
def alive(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return b"launch.sh" in handle.read()
    except OSError:
        pass
    try:
        os.kill(pid, 0)
        return not os.path.isdir("/proc")  # without /proc (macOS) the pid alone decides
    except OSError:
        return False
status = None
try:
    status = int(open(job["status"]).read().strip())
except (OSError, ValueError):
    pass
print(json.dumps({"running": alive(job["pid"]), "exit_status": status}))
"""

# Runs there: end the launcher and everything under it, politely first. The tree is frozen
# (SIGSTOP, parents first) before each signal, so no process forks a child the signal misses,
# e.g. launch.sh starting the trainer between the moment the tree is read and its own SIGTERM.
_KILL = r"""
import json, os, signal, time
job = json.loads(JOB)
def table():
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name) as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                found[int(name)] = (int(fields[1]), int(fields[3]))  # parent, session
            except (OSError, ValueError, IndexError):
                pass
    return found
def family(roots):
    procs, root = table(), job["pid"]
    found, todo = [p for p in roots if p in procs], [p for p in roots if p in procs]
    while todo:
        pid = todo.pop(0)
        for child, (parent, _session) in procs.items():
            if parent == pid and child not in found:
                found.append(child)
                todo.append(child)
    if procs.get(root, (0, 0))[1] == root:  # the launcher leads its own session (setsid, tmux, screen)
        found += [p for p, (_parent, session) in procs.items() if session == root and p not in found]
    return found
def send(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False
def freeze(known):
    # Stop parents before their children, again until no new process appears.
    stopped = []
    while True:
        new = [p for p in family(known + stopped) if p not in stopped and p != os.getpid()]
        if not new:
            return stopped
        for pid in new:
            if send(pid, signal.SIGSTOP):
                stopped.append(pid)
def launcher_alive(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return b"launch.sh" in handle.read()
    except OSError:
        return False
if not launcher_alive(job["pid"]):  # ended already (the pid may belong to another program by now)
    print(json.dumps({"ended": 0, "forced": 0}))
    raise SystemExit(0)
procs = freeze([job["pid"]])
for pid in reversed(procs):
    send(pid, signal.SIGTERM)
for pid in procs:
    send(pid, signal.SIGCONT)
deadline = time.time() + job["grace"]
def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
while time.time() < deadline:
    procs += [p for p in family([p for p in procs if alive(p)]) if p not in procs]
    if not any(alive(p) for p in procs):
        break
    time.sleep(0.2)
left = [p for p in freeze([p for p in procs if alive(p)]) if alive(p)]
for pid in left:
    send(pid, signal.SIGKILL)
print(json.dumps({"ended": len(set(procs + left)), "forced": len(left)}))
"""


def _job(code: str, job: Mapping[str, object]) -> str:
    return f"JOB = {json.dumps(json.dumps(job))}\n{code}"


def remote_state(client: SshClient, record: RemoteRunRecord) -> tuple[bool, int | None]:
    """(is it running, launch.sh's exit status once known)."""
    out = client.python(_job(_STATE, {"pid": record.pid, "status": record.status_file}), "asking about the run")
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    return bool(answer["running"]), answer["exit_status"]


def kill_remote_run(client: SshClient, record: RemoteRunRecord, grace_s: float = 10.0) -> int:
    """End the run's process tree there; returns how many processes were ended."""
    if not record.pid:
        raise RemoteError(f"the record of {record.remote_run_dir} names no process; end it on {record.machine}")
    out = client.python(_job(_KILL, {"pid": record.pid, "grace": grace_s}), "ending the run",
                        timeout_s=grace_s + 60)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["ended"])


def pull_run(client: SshClient, record: RemoteRunRecord, local_dir: Path, checkpoints: bool = False,
             mirrored: Sequence[str] = (), progress: Progress | None = None,
             state: tuple[bool, int | None] | None = None) -> TransferReport:
    """Bring the run folder back into `local_dir` (checkpoints only when asked: they are large).

    Files in `mirrored` (a live mirror's events.jsonl and console.log) are left alone. `state`
    is `remote_state`'s answer when the caller asked already.
    """
    skip = [*mirrored, *([] if checkpoints else [f"{CHECKPOINTS_DIR}/"]), STOP_FILE, *OWN_RECORDS]
    report = pull_folder(client, record.remote_run_dir, local_dir, record.copy_tool == "rsync", skip, progress)
    running, status = state or remote_state(client, record)
    if not running:
        record.state, record.exit_status = "pulled", status
        write_record(local_dir, record)
    return report


def pull_and_close(record: RemoteRunRecord, local_dir: Path, checkpoints: bool = False,
                   progress: Progress | None = None) -> TransferReport:
    """`pull_run` over a connection of its own, closed after."""
    client = client_for(record)
    try:
        return pull_run(client, record, local_dir, checkpoints=checkpoints, progress=progress)
    finally:
        client.close()


def mark_ended(local_dir: Path, record: RemoteRunRecord, exit_status: int | None) -> None:
    record.state, record.exit_status = "ended", exit_status
    write_record(local_dir, record)


# ------------------------------------------------------------ following the files live
def _tail_command(client: SshClient, record: RemoteRunRecord, name: str) -> StreamFrom:
    path = remote_path(f"{record.remote_run_dir}/{name}")
    pid = remote_path(record.pid_file)

    def start(offset: int, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        # --pid: tail ends once the launcher is gone and the file is sent to its end. The pid counts only
        # while it is still the launcher's (as in _STATE): after the machine restarted, another program (or
        # this very shell) may have its number, and the tail would wait on it for ever. With no launcher
        # (or no pid file) the rest of the file is sent and the mirror ends.
        rest = f"tail -c +{offset + 1}"
        command = (f"p=$(cat {pid} 2>/dev/null); "
                   "if [ -d /proc ] && { [ \"$p\" = \"$$\" ] || ! grep -aq launch.sh \"/proc/$p/cmdline\"; }; "
                   f"then p=; fi 2>/dev/null; if [ -n \"$p\" ]; then exec {rest} --pid=\"$p\" -F {path} 2>/dev/null; "
                   f"fi; exec {rest} {path} 2>/dev/null")
        return client.popen(f"sh -c {shlex.quote(command)}", stderr=stderr)

    return start


def _sample_fetcher(client: SshClient, record: RemoteRunRecord, local_dir: Path) -> Callable[[list[bytes]], None]:
    prefix = record.remote_run_dir.rstrip("/") + "/"

    def before_lines(lines: list[bytes]) -> None:
        rels = []
        for line in lines:
            if b'"sample"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("type") != "sample":
                continue
            # An edit run's samples name the control images they edit too (the "before" shown beside them).
            named = [event.get("images"), event.get("controls")]
            for image in [image for names in named if isinstance(names, list) for image in names]:
                rel = str(image)[len(prefix):] if str(image).startswith(prefix) else str(image)
                # Its plain name (`samples/./x.png` is `samples/x.png`): the one checked is the one rsync writes.
                rel = "/".join(part for part in rel.split("/") if part != ".")
                try:
                    contained_path(local_dir, rel, f"{record.machine} sample event")
                except OutsideFolderError as exc:
                    log.warning("%s", exc)  # the event still arrives; its image is not fetched
                    continue
                if skipped(rel, [*OWN_RECORDS, EVENTS_FILE, CONSOLE_FILE]):
                    log.warning("%s sample event: refused %r: the studio's own file of the run, not an image; "
                                "it is not fetched", record.machine, rel)
                    continue
                rels.append(rel)
        # A name sftp cannot carry is left there (and said once), not tried again: the others still come.
        for rel, why in uncarried(record.remote_run_dir, rels, local_dir, record.copy_tool == "rsync").items():
            log.warning("%s sample event: the image %r %s; it is not fetched (rename it on %s, or install rsync on "
                        "both computers)", record.machine, rel, why, record.machine)
            rels.remove(rel)
        if not rels:
            return
        for attempt in range(1, SAMPLE_TRIES + 1):
            try:
                fetch_files(client, record.remote_run_dir, rels, local_dir, record.copy_tool == "rsync")
                return
            except RemoteError as exc:
                if attempt == SAMPLE_TRIES:
                    log.warning("%d sample image(s) did not come: %s", len(rels), exc)
                time.sleep(attempt)

    return before_lines


def follow_files(client: SshClient, record: RemoteRunRecord, local_dir: Path) -> dict[str, RemoteFileMirror]:
    """Mirrors of the run's events.jsonl (samples fetched on the way) and console.log; not started yet."""
    return {
        EVENTS_FILE: RemoteFileMirror(f"{record.machine} events", local_dir / EVENTS_FILE,
                                      _tail_command(client, record, EVENTS_FILE),
                                      before_lines=_sample_fetcher(client, record, local_dir)),
        # A progress bar's \r ends a segment: its redraws are never held as one over-long line.
        CONSOLE_FILE: RemoteFileMirror(f"{record.machine} console", local_dir / CONSOLE_FILE,
                                       _tail_command(client, record, CONSOLE_FILE), breaks=b"\r\n"),
    }
