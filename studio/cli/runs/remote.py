"""`studio-train remote ...`: runs on a rented machine over SSH, from this computer.

    remote add NAME HOST [--user U] [--port P] [--key FILE] [--workspace DIR] [--python PY]
    remote list | remove NAME | check NAME
    remote run CONFIG --on NAME [--gpus N] [--cpu]   send the bundle, check, start detached
    remote watch RUN_FOLDER                          follow it here (Ctrl+C leaves it running)
    remote stop RUN_FOLDER [--kill]                  ask it to stop (or end it at once)
    remote pull RUN_FOLDER [--checkpoints]           bring the run folder back

The machines live in the user config folder; no key, password or token is kept.
"""

from __future__ import annotations

import argparse
import getpass
import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from studio.core.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK

WATCH_POLL_S = 0.2


def register(sub: Any) -> None:
    parser = sub.add_parser("remote", help="start, follow, stop and bring back runs on a remote machine over SSH",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="remote_command", metavar="ACTION", required=True)

    add = commands.add_parser("add", help="add or change a machine")
    add.add_argument("name")
    add.add_argument("host", help="host name, address, or an alias of ~/.ssh/config")
    add.add_argument("--user")
    add.add_argument("--port", type=int)
    add.add_argument("--key", dest="key_file", help="private key file (default: ~/.ssh/config and your ssh-agent)")
    add.add_argument("--workspace", default="~/studio-remote", help="folder there for bundles and runs")
    add.add_argument("--python", default="python3", help="interpreter there with the training packages")
    add.add_argument("--detach", default="auto", choices=("auto", "tmux", "screen", "nohup"),
                     help="how runs outlive the SSH session (auto: tmux, else screen, else nohup)")
    add.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="environment for launch.sh there, e.g. HF_HOME=/workspace/hf (no secrets)")
    add.add_argument("--save-passphrase", action="store_true",
                     help="keep the key's passphrase in the system keyring (asked now)")
    add.set_defaults(func=run_add)

    listing = commands.add_parser("list", help="the machines")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=run_list)
    remove = commands.add_parser("remove", help="forget a machine")
    remove.add_argument("name")
    remove.set_defaults(func=run_remove)
    check = commands.add_parser("check", help="connect and report Python, GPUs, tools and disk there")
    check.add_argument("name")
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=run_check)

    start = commands.add_parser("run", help="send CONFIG's run to a machine, check it there and start it")
    start.add_argument("config", help="a TrainConfig TOML file (e.g. a project's studio.toml)")
    start.add_argument("--on", required=True, dest="machine", metavar="NAME")
    start.add_argument("--gpus", type=int, default=1, help="GPUs to train on (default 1)")
    start.add_argument("--nodes", type=int, default=1, help="only 1: several nodes start from `studio-train export`")
    start.add_argument("--gpu-type", help="GPU type from the catalogue, for the memory estimate")
    start.add_argument("--cpu", action="store_true", help="test mode: train on the machine's CPU")
    start.add_argument("--no-check", dest="run_check", action="store_false", help="skip check.sh")
    start.set_defaults(func=run_start)

    for name, func, text in (("watch", run_watch, "follow a run here until it ends, then bring it back"),
                             ("stop", run_stop, "ask a run to stop at its next step (a checkpoint is saved)"),
                             ("pull", run_pull, "bring a run folder back (again: only what changed)")):
        action = commands.add_parser(name, help=text)
        action.add_argument("run_dir", type=Path, help="the run's folder here (printed by `remote run`)")
        action.set_defaults(func=func)
        if name == "stop":
            action.add_argument("--kill", action="store_true", help="end the run's processes at once instead")
        if name == "pull":
            action.add_argument("--checkpoints", action="store_true", help="bring the checkpoints too (large)")
        if name == "watch":
            action.add_argument("--no-pull", dest="pull", action="store_false", help="do not bring it back at the end")


def _fail(exc: Exception, code: int = EXIT_FAILED) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return code


def run_add(args: argparse.Namespace) -> int:
    from studio.core.remote.machines import MachineError, RemoteMachine, save_machine, ssh_config_view
    from studio.core.remote.passphrases import PassphraseError, store_passphrase

    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            return _fail(ValueError(f"--env {item!r}: write NAME=VALUE"), EXIT_INVALID)
        env[name] = value
    key_file = args.key_file
    if key_file and not key_file.startswith("~") and not Path(key_file).is_absolute():
        # Kept as a full path: ssh, the studio and the passphrase's keyring entry read it later from other folders.
        key_file = str(Path(key_file).absolute())
    machine = RemoteMachine(args.name, args.host, args.user, args.port, key_file, args.workspace, args.python,
                            args.detach, env)
    try:
        path = save_machine(machine)
        if args.save_passphrase:
            if not key_file:
                raise MachineError("--save-passphrase needs --key: the passphrase belongs to one key file")
            secret = getpass.getpass(f"Passphrase of {key_file}: ") if sys.stdin.isatty() else sys.stdin.readline()
            store_passphrase(key_file, secret.rstrip("\n"))
    except (MachineError, PassphraseError) as exc:
        return _fail(exc, EXIT_INVALID)
    view = ssh_config_view(args.host)
    print(f"{args.name}: {machine.describe()} kept in {path}")
    from_config = [f"{label} {view[key]}" for label, key, given in (
        ("address", "hostname", view.get("hostname") == args.host), ("user", "user", args.user),
        ("port", "port", args.port), ("key", "identityfile", args.key_file)) if not given and key in view]
    if from_config:
        print("  from your ssh configuration: " + ", ".join(from_config))
    print(f"Check it with: studio-train remote check {shlex.quote(args.name)}")
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    from studio.core.remote.machines import MachineError, load_machines

    try:
        machines = load_machines()
    except MachineError as exc:
        return _fail(exc, EXIT_INVALID)
    if args.json:
        print(json.dumps({name: asdict(m) for name, m in machines.items()}, indent=1))
    elif not machines:
        print("No remote machines yet: studio-train remote add NAME HOST")
    for m in machines.values() if not args.json else ():
        print(f"{m.name:16} {m.describe():32} workspace {m.workspace}  python {m.python}")
    return EXIT_OK


def run_remove(args: argparse.Namespace) -> int:
    from studio.core.remote.machines import remove_machine

    if not remove_machine(args.name):
        return _fail(ValueError(f"no remote machine named '{args.name}'"), EXIT_INVALID)
    print(f"{args.name} removed")
    return EXIT_OK


def run_check(args: argparse.Namespace) -> int:
    from studio.core.remote.machines import MachineError, get_machine
    from studio.core.remote.probe import probe_machine
    from studio.core.remote.ssh import RemoteError, SshClient

    try:
        client = SshClient(get_machine(args.name))
    except MachineError as exc:
        return _fail(exc, EXIT_INVALID)
    try:
        report = probe_machine(client)
    except RemoteError as exc:
        return _fail(exc)
    finally:
        client.close()
    print(json.dumps(asdict(report), indent=1) if args.json else report.summary())
    return EXIT_FAILED if report.problems() else EXIT_OK


def _progress(message: str, done: int, total: int) -> None:
    if done == 0 or done == total:
        print(f"  {message}", flush=True)


def run_start(args: argparse.Namespace) -> int:
    from studio.core.export.bundle import ExportError
    from studio.core.remote.machines import MachineError, get_machine
    from studio.core.remote.ssh import RemoteError
    from studio.core.remote.start import start_remote_run

    if args.nodes != 1:
        return _fail(ValueError("--nodes: a remote run starts on one machine; for several nodes write a bundle "
                                "with `studio-train export --nodes N` and start each node (see its README)"),
                     EXIT_INVALID)
    if args.gpus < 1:
        return _fail(ValueError(f"--gpus must be at least 1, not {args.gpus}"), EXIT_INVALID)
    try:
        machine = get_machine(args.machine)
        print(f"Sending {args.config} to {machine.name} ({machine.describe()})…", flush=True)
        started = start_remote_run(args.config, machine, gpus=args.gpus, cpu=args.cpu, gpu_type=args.gpu_type,
                                   run_check=args.run_check, progress=_progress)
    except (MachineError, ExportError) as exc:
        return _fail(exc, EXIT_INVALID)
    except (RemoteError, OSError) as exc:
        return _fail(exc)
    print(started.summary())
    return EXIT_OK


def _record(run_dir: Path) -> Any:
    from studio.core.remote.control import read_record

    return read_record(run_dir)


def run_stop(args: argparse.Namespace) -> int:
    from studio.core.remote.control import client_for, kill_remote_run, request_remote_stop
    from studio.core.remote.machines import MachineError
    from studio.core.remote.ssh import RemoteError

    try:
        record = _record(args.run_dir)
        client = client_for(record)
    except (RemoteError, MachineError) as exc:
        return _fail(exc)
    try:
        if args.kill:
            ended = kill_remote_run(client, record)
            print(f"ended {ended} process(es) of {record.remote_run_dir} on {record.machine}" if ended
                  else f"{record.remote_run_dir} was not running on {record.machine}")
        else:
            request_remote_stop(client, record)
            print(f"asked {record.remote_run_dir} on {record.machine} to stop at its next step")
    except RemoteError as exc:
        return _fail(exc)
    finally:
        client.close()
    return EXIT_OK


def run_pull(args: argparse.Namespace) -> int:
    from studio.core.remote.control import pull_and_close
    from studio.core.remote.machines import MachineError
    from studio.core.remote.ssh import RemoteError

    try:
        record = _record(args.run_dir)
        report = pull_and_close(record, args.run_dir, checkpoints=args.checkpoints, progress=_progress)
    except (RemoteError, MachineError, OSError) as exc:  # OSError: this computer's side (a full disk)
        return _fail(exc)
    print(f"{len(report.copied)} file(s) brought back ({report.bytes_copied / 2**20:.1f} MB), "
          f"{report.unchanged} already here, into {args.run_dir}")
    return EXIT_OK


def run_watch(args: argparse.Namespace) -> int:
    from studio.core.remote.control import client_for, follow_files, mark_ended, pull_run, remote_state
    from studio.core.remote.machines import MachineError
    from studio.core.remote.ssh import RemoteError
    from studio.core.runs.folders import CONSOLE_FILE, EVENTS_FILE

    try:
        record = _record(args.run_dir)
        client = client_for(record)
    except (RemoteError, MachineError) as exc:
        return _fail(exc)
    try:
        mirrors = follow_files(client, record, args.run_dir)
    except (RemoteError, OSError) as exc:  # followed already (the studio has it open), or not writable here
        client.close()
        return _fail(exc)
    console = args.run_dir / CONSOLE_FILE
    shown = console.stat().st_size if console.exists() else 0
    for mirror in mirrors.values():
        mirror.start()
    try:
        while not mirrors[EVENTS_FILE].ended:
            shown = _print_new(console, shown)
            for mirror in mirrors.values():
                while mirror.stream.notices:
                    print(f"[studio] {mirror.stream.notices.popleft()}", file=sys.stderr)
            time.sleep(WATCH_POLL_S)
        mirrors[CONSOLE_FILE].wait(10)
        _print_new(console, shown)
    except KeyboardInterrupt:
        print(f"\nStopped watching; the run goes on on {record.machine}. "
              f"Again: studio-train remote watch {shlex.quote(str(args.run_dir))}", file=sys.stderr)
        client.close()
        # Not the run's end: a script's `remote watch && pull` must not go on as if it had finished.
        return EXIT_INTERRUPTED
    finally:
        for mirror in mirrors.values():
            mirror.close()
    try:
        state = remote_state(client, record)
        status = state[1]
        mark_ended(args.run_dir, record, status)
        if args.pull:
            report = pull_run(client, record, args.run_dir, mirrored=(EVENTS_FILE, CONSOLE_FILE), state=state)
            print(f"{len(report.copied)} file(s) brought back into {args.run_dir}")
    except (RemoteError, OSError) as exc:
        return _fail(exc)
    finally:
        client.close()
    if status != 0:
        how = f"exit status {status}" if status is not None else "no exit status (it was killed)"
        print(f"the run ended on {record.machine} with {how}; see {args.run_dir / CONSOLE_FILE}", file=sys.stderr)
    return EXIT_OK if status == 0 else EXIT_FAILED


def _print_new(path: Path, offset: int) -> int:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return offset
    if data:
        sys.stdout.write(data.decode("utf-8", "replace"))
        sys.stdout.flush()
    return offset + len(data)
