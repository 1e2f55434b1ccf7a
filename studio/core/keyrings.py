"""The one way a secret (the hub token, a key's passphrase) reaches the operating system's keyring.

The `keyring` package picks the best backend it finds, and when keyrings.alt is installed
(it comes with some development environments) that can be a file in the home folder, with
the secret in it as base64 or under a password kept beside it. A person asked for the
system keyring, so a file backend is refused here, never chosen silently, and the backend
that keeps a secret is named as what it is. Tests, and a person who says so, allow a file
backend explicitly with STUDIO_ALLOW_FILE_KEYRING=1.
"""

from __future__ import annotations

import os
from typing import Any

ALLOW_FILE_ENV = "STUDIO_ALLOW_FILE_KEYRING"
# Backends that keep secrets in files or nowhere: keyrings.alt's, and keyring's null and fail ones.
_NOT_A_SYSTEM_KEYRING = ("keyrings.alt", "keyring.backends.null", "keyring.backends.fail")
_NAMES = {"SecretService": "the Secret Service keyring (GNOME Keyring, KWallet 6, KeePassXC)",
          "kwallet": "KWallet", "macOS": "the macOS Keychain", "Windows": "the Windows Credential Manager",
          "libsecret": "the Secret Service keyring (libsecret)"}


class KeyringUnavailable(RuntimeError):
    """No system keyring can keep the secret; the message says why and what to do instead."""


def _backends(backend: Any) -> list[Any]:
    return list(getattr(backend, "backends", None) or [backend])  # a ChainerBackend holds several


def _is_system(backend: Any) -> bool:
    return not type(backend).__module__.startswith(_NOT_A_SYSTEM_KEYRING)


def backend_name(backend: Any) -> str:
    """What keeps a secret, in words: `the Secret Service keyring …`, `a file (keyrings.alt.file.…)`."""
    parts = _backends(backend)
    system = [b for b in parts if _is_system(b)]
    chosen = system[0] if system else parts[0]
    module = type(chosen).__module__
    if not _is_system(chosen):
        return f"a file, not the system keyring ({module}.{type(chosen).__name__})"
    for key, words in _NAMES.items():
        if key.lower() in module.lower() or key.lower() in type(chosen).__name__.lower():
            return words
    return f"the keyring backend {module}.{type(chosen).__name__}"


def system_keyring(what: str, instead: str) -> tuple[Any, Any]:
    """(the backend that keeps secrets, `keyring.errors`): a system keyring, never a file unless allowed
    explicitly. `what` names the secret and `instead` what the person can do without a keyring."""
    try:
        import keyring
        import keyring.errors
    except ImportError:
        raise KeyringUnavailable(f"The keyring package is not installed, so {what} cannot be kept safely: install "
                                 f"it (pip install keyring), or {instead}.") from None
    backend = keyring.get_keyring()
    if os.environ.get(ALLOW_FILE_ENV) == "1":
        return backend, keyring.errors
    system = [b for b in _backends(backend) if _is_system(b)]
    if not system:
        raise KeyringUnavailable(f"No system keyring is available: the keyring package would keep {what} in "
                                 f"{backend_name(backend)}. Nothing was kept; start your desktop's keyring "
                                 f"(GNOME Keyring, KWallet), or {instead}. To accept a file anyway, set "
                                 f"{ALLOW_FILE_ENV}=1.")
    # A chain of backends would write to whichever ranks first: the system one is asked alone.
    return (system[0] if len(system) < len(_backends(backend)) else backend), keyring.errors


def keyring_in_use(what: str, instead: str) -> str:
    """The words for where a secret is kept (`system_keyring`'s backend), for the message after a store."""
    backend, _errors = system_keyring(what, instead)
    return backend_name(backend)
