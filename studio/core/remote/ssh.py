"""The system's OpenSSH client, run as a subprocess for everything the studio does remotely.

Why OpenSSH and not a Python SSH library: it is on every Linux and macOS machine and
on Windows 10+, it honours the person's ~/.ssh/config, keys and agent as their own
terminal does, and it adds no dependency. Every call runs in batch mode (a prompt
fails at once instead of hanging the window) with a connect timeout and keep-alives;
on Linux and macOS one master connection per machine (ControlMaster/ControlPersist)
carries the many short calls and the long streams, so a GPU sample a second does not
cost a login a second.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from studio.core.app_words import command_or_action
from studio.core.console_window import no_window
from studio.core.quoting import UnsafeNameError, sh_word
from studio.core.remote.machines import RemoteMachine, ssh_config_args
from studio.core.remote.passphrases import askpass_env, key_is_encrypted, read_passphrase

CONNECT_TIMEOUT_S = 10
PERSIST_S = 300  # the master connection outlives the last call by this much
SSH_LOST = 255


class RemoteError(RuntimeError):
    """A remote operation failed; the message says what, on which machine, and what to do."""


@dataclass
class Completed:
    code: int
    stdout: str
    stderr: str


def remote_path(path: str) -> str:
    """A shell word for a remote path (a name from there stays a name, see studio/core/quoting.py); a leading
    ~ stays the remote home ("$HOME"/...). The machine's python is one too (`~/venv/bin/python`)."""
    try:
        if path == "~":
            return '"$HOME"'
        if path.startswith("~/"):
            return '"$HOME"/' + sh_word(path[2:])
        return sh_word(path)
    except UnsafeNameError as exc:
        raise RemoteError(f"the path there {exc}") from None


def _ssh_program() -> str:
    ssh = shutil.which("ssh")
    if ssh is None:
        raise RemoteError("the ssh command is not installed on this computer: install OpenSSH (on Windows 10+: "
                          "Settings > Apps > Optional features > OpenSSH Client; on Linux: the openssh-client package)")
    return ssh


_OWN_SOCKETS: list[Path] = []  # this process's socket folder, when the shared name is not this account's alone


def _is_private(folder: Path) -> bool:
    """A real folder (not a link) of this account that no other account may write in or read."""
    try:
        found = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not found.st_mode & 0o077


def _own_socket_folder() -> Path:
    if not _OWN_SOCKETS:
        _OWN_SOCKETS.append(Path(tempfile.mkdtemp(prefix="studio-ssh-")))  # made private, under a name none can guess
    return _OWN_SOCKETS[0]


class SshClient:
    """One remote machine, reached through the system's ssh."""

    def __init__(self, machine: RemoteMachine, connect_timeout_s: int = CONNECT_TIMEOUT_S) -> None:
        self.machine = machine
        self.connect_timeout_s = connect_timeout_s
        self.multiplex = os.name != "nt"  # Windows' OpenSSH has no ControlMaster
        self._master_lock = threading.Lock()
        key = machine.key_file
        # The keyring is asked only for a key that needs a passphrase (a desktop keyring may ask to unlock).
        kept = key is not None and key_is_encrypted(key) and read_passphrase(key) is not None
        self._askpass = askpass_env(key) if key and kept else None

    # ------------------------------------------------------------ command lines
    def control_path(self) -> Path:
        # Unix sockets allow ~100 characters: a short folder of this user's, the %C hash inside.
        folder = Path(tempfile.gettempdir()) / f"studio-ssh-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
        with contextlib.suppress(OSError):
            folder.mkdir(mode=0o700)
        if not _is_private(folder):
            # The temporary folder is everyone's on a shared computer: another account that made this name first
            # could put a socket there, and ssh would hand it every command, answer and file of the studio's
            # (the dataset sent, the run brought back). This process keeps its sockets in a folder of its own.
            folder = _own_socket_folder()
        return folder / "%C"

    def options(self, master: bool = False) -> list[str]:
        """ssh options as `-o Key=Value` (the same list serves ssh, sftp and rsync's -e)."""
        m = self.machine
        opts = [*ssh_config_args()]
        settings = {
            "BatchMode": "no" if self._askpass else "yes",
            "ConnectTimeout": str(self.connect_timeout_s),
            "ServerAliveInterval": "5",
            "ServerAliveCountMax": "3",
            # A rented machine is new each time: its key is learnt on first use, and a changed key refused.
            "StrictHostKeyChecking": "accept-new",
            "PasswordAuthentication": "no",
            "KbdInteractiveAuthentication": "no",
        }
        if m.port:
            settings["Port"] = str(m.port)
        if m.user:
            settings["User"] = m.user
        if m.key_file:
            settings["IdentityFile"] = str(Path(m.key_file).expanduser())
            settings["IdentitiesOnly"] = "yes"
        if self.multiplex:
            settings["ControlPath"] = str(self.control_path())
            settings["ControlMaster"] = "yes" if master else "no"
            if master:
                settings["ControlPersist"] = str(PERSIST_S)
        for key, value in settings.items():
            opts += ["-o", f"{key}={value}"]
        return opts

    def ssh_argv(self, command: str) -> list[str]:
        return [_ssh_program(), *self.options(), self.machine.host, command]

    def env(self) -> dict[str, str] | None:
        return {**os.environ, **self._askpass} if self._askpass else None

    # ------------------------------------------------------------ the master connection
    def ensure_master(self) -> None:
        """Open the shared connection unless it is open; raises RemoteError when the machine cannot be reached."""
        if not self.multiplex:
            return
        with self._master_lock:
            if self._control(["-O", "check"]) == 0:
                return
            with tempfile.TemporaryFile() as stderr:
                # The master lives on in the background: its output must go to a file, not a pipe
                # that the call would wait on until the master exits.
                try:
                    code = subprocess.run(
                        [_ssh_program(), *self.options(master=True), "-N", "-f", self.machine.host],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=self.env(),
                        timeout=self.connect_timeout_s + 20).returncode
                except subprocess.TimeoutExpired:
                    raise RemoteError(self._unreachable(f"no answer within {self.connect_timeout_s + 20} s")) from None
                if code != 0:
                    stderr.seek(0)
                    raise RemoteError(self.explain(stderr.read().decode("utf-8", "replace"), "connect"))

    def close(self) -> None:
        """End the shared connection (running remote commands are not affected: they are detached)."""
        if self.multiplex:
            self._control(["-O", "exit"])

    def _control(self, args: list[str]) -> int:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            return subprocess.run([_ssh_program(), *self.options(), *args, self.machine.host],
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=10).returncode
        return -1

    # ------------------------------------------------------------ running things there
    def run(self, script: str, doing: str, timeout_s: float = 120, check: bool = True) -> Completed:
        """Run a POSIX sh script there (sent on stdin: no quoting through the login shell)."""
        return self._call(self.ssh_argv("sh -s"), script, doing, timeout_s, check)

    def python(self, code: str, doing: str, timeout_s: float = 300, check: bool = True) -> Completed:
        """Run Python code with the machine's interpreter (sent on stdin)."""
        return self._call(self.ssh_argv(f"{remote_path(self.machine.python)} -"), code, doing, timeout_s, check)

    def popen(self, command: str, stderr: IO[bytes] | int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        """Start a long command there with its stdout piped here (a stream)."""
        with contextlib.suppress(RemoteError):  # the command then reports the failure itself (status 255)
            self.ensure_master()
        return subprocess.Popen(self.ssh_argv(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=stderr, env=self.env(), creationflags=no_window())

    def call(self, argv: Sequence[str], doing: str, timeout_s: float, check: bool = True,
             stdin_text: str | None = None) -> Completed:
        """Run a local command that talks to the machine (rsync, sftp) with this client's environment."""
        return self._call(list(argv), stdin_text, doing, timeout_s, check)

    def _call(self, argv: list[str], stdin_text: str | None, doing: str, timeout_s: float, check: bool) -> Completed:
        self.ensure_master()
        # A name that is not UTF-8 (a surrogate escape here) goes as its own bytes, not as a '?' that names
        # another file; what comes back is read as UTF-8, anything else replaced.
        stdin = (stdin_text or "").encode("utf-8", "surrogateescape")
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, env=self.env(), timeout=timeout_s,
                                  creationflags=no_window())
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{doing} on {self.machine.name} did not finish within {timeout_s:.0f} s; "
                              "check the connection and try again") from None
        result = Completed(done.returncode, _text(done.stdout), _text(done.stderr))
        if check and result.code != 0:
            if result.code == SSH_LOST:
                raise RemoteError(self.explain(result.stderr, doing))
            raise RemoteError(f"{doing} on {self.machine.name} failed (exit status {result.code}): "
                              f"{_last_lines(result.stderr or result.stdout)}")
        return result

    # ------------------------------------------------------------ errors a person can act on
    def explain(self, stderr: str, doing: str) -> str:
        m, text = self.machine, stderr.lower()
        where = f"{m.name} ({m.describe()})"
        if "host identification has changed" in text or "host key verification failed" in text:
            # known_hosts names a machine on another port than 22 as [host]:port: only that form forgets it.
            if m.port and m.port != 22:
                forget = f"`ssh-keygen -R {sh_word(f'[{m.host}]:{m.port}')}`"
            else:
                forget = f"`ssh-keygen -R {m.host}`" + ("" if m.port else f" (or `ssh-keygen -R '[{m.host}]:PORT'` "
                                                                        "when its port is not 22)")
            return (f"the host key of {where} is not the one seen before: if you rented a new machine at the same "
                    f"address, forget the old key with {forget}, then try again")
        if "permission denied" in text:
            if m.key_file and key_is_encrypted(m.key_file) and not self._askpass:
                return (f"{where} needs the passphrase of {m.key_file}: add the key to your ssh-agent (ssh-add "
                        f"{m.key_file}), or keep the passphrase in the system keyring "
                        + command_or_action(f"(studio-train remote add {m.name} ... --save-passphrase)",
                                            "(type it in the machine's passphrase field on the Export page)"))
            key = m.key_file or "your ssh keys (~/.ssh/config, ssh-agent)"
            return (f"{where} refused {key}: put the public key in the machine's ~/.ssh/authorized_keys (on a "
                    "rented machine: the provider's SSH key settings) or name the right key file")
        if "too many authentication failures" in text:
            # Each key offered counts as a try: with several in the agent or ~/.ssh the server hangs up first.
            named = f" ({m.key_file} was offered among others)" if m.key_file else ""
            return (f"{where} hung up after too many keys were offered{named} (your ssh-agent or ~/.ssh holds "
                    "several): name the machine's key file, so that only it is offered "
                    + command_or_action(f"(studio-train remote add {m.name} {m.host} ... --key FILE)",
                                        "(the machine's key file field on the Export page)"))
        if "could not resolve hostname" in text or "name or service not known" in text:
            return f"cannot find the host {m.host!r} of {where}: check its name or address"
        if "connection refused" in text:
            return self._unreachable("nothing answers for SSH there (connection refused): check the port (rented "
                                     "machines often map SSH to another port) and that the machine is running")
        if "timed out" in text or "no route to host" in text or "network is unreachable" in text:
            return self._unreachable(f"no answer within {self.connect_timeout_s} s: check the address, the port and "
                                     "that the machine is running")
        return f"{doing} on {where} failed: {_last_lines(stderr) or 'ssh gave no reason'}"

    def _unreachable(self, why: str) -> str:
        return f"cannot reach {self.machine.name} ({self.machine.describe()}): {why}"


def _text(data: bytes) -> str:
    # Universal newlines, as text mode read it before.
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-count:])
