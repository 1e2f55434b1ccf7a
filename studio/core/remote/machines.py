"""Remote machines the studio starts runs on over SSH: where they are, never how to log in.

A machine is a name for a host, user, port, key file (a path: the key stays where it
is), a workspace folder there and its Python. The list lives in the user config
folder (`remote_machines.toml`), never in a project or a bundle; no password, token or
key text is accepted into it. What `~/.ssh/config` says about a host counts as well:
the system's ssh reads it, and `ssh_config_view` shows what it resolves to.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from studio.core.app_words import command_or_action
from studio.core.console_window import no_window
from studio.core.export.bundle_files import find_secrets
from studio.core.files import atomic_write_text
from studio.core.user_dirs import config_dir

MACHINES_FILE = "remote_machines.toml"
# Tests and people with a non-standard ssh set-up point the studio's ssh at another config file.
SSH_CONFIG_ENV = "STUDIO_SSH_CONFIG"
DETACH_MODES = ("auto", "tmux", "screen", "nohup")
DEFAULT_WORKSPACE = "~/studio-remote"
STATE_DIR = ".studio-remote"  # in a project's folder there: the pid files, exit statuses and logs of its runs
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HOST = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MachineError(ValueError):
    """A machine entry is wrong or missing; the message says which field and what to do."""


@dataclass
class RemoteMachine:
    name: str
    host: str
    user: str | None = None
    port: int | None = None
    key_file: str | None = None
    workspace: str = DEFAULT_WORKSPACE
    python: str = "python3"
    detach: str = "auto"  # auto | tmux | screen | nohup: how a run outlives the SSH session
    env: dict[str, str] = field(default_factory=dict)  # for launch.sh there, e.g. HF_HOME=/workspace/hf

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def describe(self) -> str:
        return self.target + (f":{self.port}" if self.port else "")

    def ssh_command(self) -> str:
        """The command a person types to reach the machine the same way."""
        parts = ["ssh", *(["-p", str(self.port)] if self.port else []),
                 *(["-i", self.key_file] if self.key_file else []), self.target]
        return " ".join(shlex.quote(p) for p in parts)

    def to_data(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "name" and v not in (None, {}, "")}


_TYPES: dict[str, tuple[type, ...]] = {"name": (str,), "host": (str,), "user": (str, type(None)),
                                      "port": (int, type(None)), "key_file": (str, type(None)), "workspace": (str,),
                                      "python": (str,), "detach": (str,), "env": (dict,)}


def validate_machine(machine: RemoteMachine, check_key_file: bool = True) -> RemoteMachine:
    """Check every field; raises MachineError naming the field, the value and what is allowed.

    `check_key_file` False leaves out whether the key file exists (a list read from disk stays
    readable while one key is moved; connecting checks it).
    """
    where = f"remote machine '{machine.name}'"
    for key, types in _TYPES.items():
        value = getattr(machine, key)
        if not isinstance(value, types) or isinstance(value, bool):
            raise MachineError(f"{where}: {key} = {value!r} must be {' or '.join(t.__name__ for t in types)}")
    if any(not isinstance(k, str) or not isinstance(v, str) for k, v in machine.env.items()):
        raise MachineError(f"{where}: env holds names and values that are text only")
    if not _NAME.match(machine.name):
        raise MachineError(f"machine name {machine.name!r}: use letters, digits, '.', '_' or '-' (up to 64)")
    if not machine.host or not _HOST.match(machine.host) or machine.host.startswith("-"):
        raise MachineError(f"{where}: host {machine.host!r} is not a host name, address or ~/.ssh/config alias")
    if machine.user is not None and (not machine.user or machine.user.startswith("-") or "@" in machine.user
                                     or any(c.isspace() for c in machine.user)):
        raise MachineError(f"{where}: user {machine.user!r} is not a login name")
    if machine.port is not None and not 1 <= machine.port <= 65535:
        raise MachineError(f"{where}: port {machine.port} must be between 1 and 65535")
    if machine.key_file is not None and (check_key_file or "\n" in machine.key_file or
                                         machine.key_file.startswith("-")):
        _check_key_file(where, Path(machine.key_file).expanduser())
    if machine.detach not in DETACH_MODES:
        raise MachineError(f"{where}: detach {machine.detach!r} must be one of {', '.join(DETACH_MODES)}")
    if not machine.workspace.strip() or "\n" in machine.workspace:
        raise MachineError(f"{where}: the workspace must be a folder on the machine, e.g. {DEFAULT_WORKSPACE}")
    if not machine.python.strip() or "\n" in machine.python:
        raise MachineError(f"{where}: python must name the interpreter there, e.g. python3 or /opt/venv/bin/python")
    for name in machine.env:
        if not _ENV_NAME.match(name):
            raise MachineError(f"{where}: {name!r} is not an environment variable name")
    secrets = find_secrets(machine.to_data())
    if secrets:
        raise MachineError(f"{where}: {', '.join(secrets)} look like a password or token; the studio never keeps "
                           "those: a run there is handed the Hugging Face token kept here (the keyring or HF_TOKEN) by "
                           "itself; set others on the machine itself (e.g. in its ~/.bashrc) or use an ssh-agent")
    return machine


def _check_key_file(where: str, path: Path) -> None:
    if path.suffix == ".pub":
        raise MachineError(f"{where}: {path} is a public key; name the private key beside it ({path.with_suffix('')})")
    if not path.is_file():
        raise MachineError(f"{where}: the key file {path} does not exist; give the private key's path "
                           "(e.g. ~/.ssh/id_ed25519) or leave it out to use ~/.ssh/config and your ssh-agent")
    try:
        head = path.read_bytes()[:64]
    except OSError as exc:
        raise MachineError(f"{where}: cannot read the key file {path}: {exc}") from None
    if b"PRIVATE KEY" not in head and b"PuTTY" not in head:
        raise MachineError(f"{where}: {path} does not look like a private key (no 'PRIVATE KEY' header)")


def machines_path() -> Path:
    return config_dir() / MACHINES_FILE


def load_machines() -> dict[str, RemoteMachine]:
    """Every machine in the user's list, by name (none when the file does not exist)."""
    path = machines_path()
    if not path.is_file():
        return {}
    try:
        # -sig: a file saved by Notepad with a byte-order mark reads as the same TOML
        data = tomlkit.parse(path.read_text(encoding="utf-8-sig")).unwrap()
    except (OSError, ValueError, TOMLKitError) as exc:  # TOMLKitError: a key set twice in one machine's table
        raise MachineError(f"cannot read {path}: {exc}; fix or delete the file") from None
    machines = {}
    for name, entry in dict(data.get("machines", {})).items():
        try:
            machines[name] = RemoteMachine(name=name, **entry)
        except TypeError as exc:
            raise MachineError(f"{path}: machine '{name}': {exc}; allowed keys: host, user, port, key_file, "
                               "workspace, python, detach, env") from None
        try:  # the file may have been edited by hand: read back under the rules it was saved with
            validate_machine(machines[name], check_key_file=False)
        except MachineError as exc:
            raise MachineError(f"{path}: {exc}; fix it there or remove the machine") from None
    return machines


def get_machine(name: str) -> RemoteMachine:
    machines = load_machines()
    if name not in machines:
        known = ", ".join(sorted(machines)) or "none yet"
        raise MachineError(f"no remote machine named '{name}' (known: {known}); add it "
                           + command_or_action(f"with `studio-train remote add {name} HOST` or on the Export page",
                                               "on the Export page"))
    return validate_machine(machines[name])


def save_machine(machine: RemoteMachine) -> Path:
    """Add or replace a machine in the user's list; returns the file."""
    validate_machine(machine)
    machines = load_machines()
    machines[machine.name] = machine
    return _write(machines)


def remove_machine(name: str) -> bool:
    machines = load_machines()
    if machines.pop(name, None) is None:
        return False
    _write(machines)
    return True


def _write(machines: dict[str, RemoteMachine]) -> Path:
    path = machines_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    document = tomlkit.document()
    document.add(tomlkit.comment("Remote machines of the training studio. No password, token or key is kept here."))
    table = tomlkit.table()
    for name in sorted(machines):
        table[name] = machines[name].to_data()
    document["machines"] = table
    atomic_write_text(path, tomlkit.dumps(document))
    return path


def ssh_config_args() -> list[str]:
    """`-F FILE` when $STUDIO_SSH_CONFIG names another ssh config than ~/.ssh/config."""
    other = os.environ.get(SSH_CONFIG_ENV)
    return ["-F", other] if other else []


def ssh_config_view(host: str) -> dict[str, str]:
    """What the system's ssh makes of `host` (`ssh -G`: user, hostname, port, identity files); {} without ssh."""
    ssh = shutil.which("ssh")
    if ssh is None or host.startswith("-"):
        return {}
    try:
        done = subprocess.run([ssh, *ssh_config_args(), "-G", host], capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL, creationflags=no_window())
    except (OSError, subprocess.TimeoutExpired):
        return {}
    view: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("user", "hostname", "port"):
            view[key] = value
        elif key == "identityfile":
            view.setdefault("identityfile", value)
    return view
