"""A key's passphrase in the operating system's keyring, only when the person asks for it.

ssh runs in batch mode (no prompt may hang the window), so a key with a passphrase
works through the person's ssh-agent, or through this: the passphrase is kept in the
system keyring, and ssh asks for it through SSH_ASKPASS, a small script that runs
`python -m studio.core.remote.passphrases` and prints it. The script and the
environment hold no secret; nothing is written to a project, a bundle or a log.
"""

from __future__ import annotations

import base64
import os
import shlex
import stat
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from studio.core.keyrings import KeyringUnavailable, system_keyring
from studio.core.studio_command import studio_command
from studio.core.user_dirs import APP_NAME, cache_dir

KEY_ENV = "STUDIO_ASKPASS_KEY"  # which key's passphrase the askpass script prints
ASKPASS_MODULE = "studio.core.remote.passphrases"
_OPENSSH_MAGIC = b"openssh-key-v1\0"


class PassphraseError(RuntimeError):
    """The passphrase cannot be kept or read; the message says why and what to do."""


def _keyring() -> tuple[Any, Any]:
    try:
        return system_keyring("the passphrase", "add the key to your ssh-agent (ssh-add)")
    except KeyringUnavailable as exc:
        raise PassphraseError(str(exc)) from None


def _account(key_file: str | Path) -> str:
    return f"ssh-key:{Path(key_file).expanduser().resolve()}"


def key_is_encrypted(key_file: str | Path) -> bool:
    """Does the private key need a passphrase? (OpenSSH and PEM formats; False when unreadable)."""
    try:
        text = Path(key_file).expanduser().read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    lines = text.strip().splitlines()
    if any("ENCRYPTED" in line for line in lines[:3]):  # PEM: "Proc-Type: 4,ENCRYPTED", PKCS#8
        return True
    if not lines or "OPENSSH PRIVATE KEY" not in lines[0]:
        return False
    try:
        blob = base64.b64decode("".join(line for line in lines[1:] if "-----" not in line))
    except ValueError:
        return False
    if not blob.startswith(_OPENSSH_MAGIC):
        return False
    (length,) = struct.unpack(">I", blob[len(_OPENSSH_MAGIC):len(_OPENSSH_MAGIC) + 4])
    cipher = blob[len(_OPENSSH_MAGIC) + 4:len(_OPENSSH_MAGIC) + 4 + length]
    return cipher != b"none"


def store_passphrase(key_file: str | Path, passphrase: str) -> None:
    if not passphrase:
        raise PassphraseError("the passphrase is empty; nothing was kept")
    backend, errors = _keyring()
    try:
        backend.set_password(APP_NAME, _account(key_file), passphrase)
    except errors.KeyringError as exc:
        raise PassphraseError(f"the system keyring refused the passphrase ({exc}): unlock it, or add the key to "
                              "your ssh-agent instead (ssh-add)") from None


def read_passphrase(key_file: str | Path) -> str | None:
    try:
        backend, errors = _keyring()
    except PassphraseError:
        return None
    try:
        return backend.get_password(APP_NAME, _account(key_file)) or None
    except errors.KeyringError:
        return None


def forget_passphrase(key_file: str | Path) -> bool:
    backend, errors = _keyring()
    try:
        backend.delete_password(APP_NAME, _account(key_file))
    except errors.PasswordDeleteError:
        return False
    return True


def askpass_env(key_file: str | Path) -> dict[str, str]:
    """Environment for ssh that answers the passphrase prompt of `key_file` from the keyring."""
    script = _askpass_script()
    package_root = str(Path(__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH")
    return {
        "SSH_ASKPASS": str(script),
        "SSH_ASKPASS_REQUIRE": "force",  # never the terminal, even when there is one
        "DISPLAY": os.environ.get("DISPLAY", ":0"),  # older ssh asks askpass only with a DISPLAY
        KEY_ENV: str(Path(key_file).expanduser().resolve()),
        "PYTHONPATH": package_root + (os.pathsep + path if path else ""),
    }


def _askpass_script() -> Path:
    """A script that runs this module with this Python; it holds no secret."""
    folder = cache_dir() / "ssh"
    folder.mkdir(parents=True, exist_ok=True)
    # The frozen app runs it with its own binary (`--run-module`), a checkout with its Python.
    command = studio_command([], module=ASKPASS_MODULE)
    if os.name == "nt":
        script = folder / "askpass.cmd"
        text = "@" + subprocess.list2cmdline(command) + " %*\r\n"
    else:
        script = folder / "askpass.sh"
        text = "#!/bin/sh\nexec " + shlex.join(command) + ' "$@"\n'
    if not script.is_file() or script.read_text(encoding="utf-8") != text:
        script.write_text(text, encoding="utf-8")
        script.chmod(stat.S_IRWXU)
    return script


def main(argv: list[str]) -> int:
    """SSH_ASKPASS: print the passphrase of $STUDIO_ASKPASS_KEY when ssh asks for a passphrase, else refuse."""
    prompt = " ".join(argv).lower()
    key = os.environ.get(KEY_ENV)
    if not key or "passphrase" not in prompt:
        return 1  # a password or a yes/no question: never answered from the keyring
    passphrase = read_passphrase(key)
    if passphrase is None:
        return 1
    sys.stdout.write(passphrase + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
