"""The person's Hugging Face token: kept in the operating system's keyring, sent only to the hub.

It is read only by the process that downloads, and never written to a config, a log, a
run folder or a bundle (`core/keyrings.py` refuses a file backend). It goes only to the
configured endpoint's host, and to the hub's own CDN hosts when the endpoint is the hub
(`token_may_go_to`); a redirect elsewhere gets no token. Without a keyring,
huggingface_hub's own HF_TOKEN still works. A run started on another machine (a cloud cluster, a
remote machine over SSH) that downloads its base there is handed the token as HF_TOKEN in its
environment, through no file and no command line (`token_for_a_run_elsewhere`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from studio.core.keyrings import KeyringUnavailable, keyring_in_use, system_keyring
from studio.core.user_dirs import APP_NAME

KEYRING_USER = "huggingface-token"
HUB_HOST = "huggingface.co"
HUB_CDN_DOMAINS = ("huggingface.co", "hf.co")  # cdn-lfs*.huggingface.co, cas-bridge.xethub.hf.co, ...
_INSTEAD = "set HF_TOKEN in the environment for this session"


class TokenStoreError(RuntimeError):
    """The token cannot be kept or read; the message says why and what to do."""


def token_may_go_to(url: str, endpoint: str) -> bool:
    """Whether the hub token may be sent with a request to `url`: only to the endpoint's own host (same
    scheme and port), or to the hub's CDN over https when the endpoint is the hub itself."""
    target, home = urlsplit(url), urlsplit(endpoint)
    if not target.hostname or not home.hostname:
        return False
    host, home_host = target.hostname.lower(), home.hostname.lower()
    if host == home_host and target.scheme == home.scheme and target.port == home.port:
        return True
    if home_host == HUB_HOST and target.scheme == "https":
        return any(host == d or host.endswith("." + d) for d in HUB_CDN_DOMAINS)
    return False


def _keyring() -> tuple[Any, Any]:
    try:
        return system_keyring("the token", _INSTEAD)
    except KeyringUnavailable as exc:
        raise TokenStoreError(str(exc)) from None


def where_kept() -> str:
    """Where a stored token is kept, in words (the backend's real name)."""
    try:
        return keyring_in_use("the token", _INSTEAD)
    except KeyringUnavailable as exc:
        raise TokenStoreError(str(exc)) from None


def read_token() -> str | None:
    """The stored token, or None when there is none (or no keyring to keep one)."""
    try:
        backend, errors = _keyring()
    except TokenStoreError:
        return None
    try:
        return backend.get_password(APP_NAME, KEYRING_USER) or None
    except errors.KeyringError:  # no backend, or a locked wallet: no token then
        return None


def store_token(token: str) -> None:
    token = token.strip()
    if not token:
        raise TokenStoreError("The token is empty: paste the token from https://huggingface.co/settings/tokens.")
    backend, errors = _keyring()
    try:
        backend.set_password(APP_NAME, KEYRING_USER, token)
    except errors.KeyringError as exc:
        raise TokenStoreError(f"The system keyring refused the token ({exc}): unlock it or set HF_TOKEN in the "
                              "environment instead.") from None


def forget_token() -> bool:
    """Remove the stored token; False when there was none."""
    backend, errors = _keyring()
    try:
        backend.delete_password(APP_NAME, KEYRING_USER)
    except errors.PasswordDeleteError:
        return False
    return True


def _hub_login_token() -> str | None:
    """The token of huggingface_hub's own login on this machine (`hf auth login`), read from its file. The bundle's
    check looks for the same file in its own words (`export/check.py` runs alone on the machine there, on the
    standard library only, and models may not import export)."""
    if os.environ.get("HF_TOKEN_PATH"):
        path = Path(os.environ["HF_TOKEN_PATH"]).expanduser()
    elif os.environ.get("HF_HOME"):
        path = Path(os.environ["HF_HOME"]).expanduser() / "token"
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
        path = cache / "huggingface" / "token"
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def token_for_a_run_elsewhere() -> str | None:
    """The token downloads here use, for a run on another machine (a cloud cluster, a remote machine) that
    downloads its base from the hub: the one kept in the keyring, else HF_TOKEN, else huggingface_hub's login."""
    return read_token() or os.environ.get("HF_TOKEN", "").strip() or _hub_login_token()
