"""The person's Hugging Face token, kept in the operating system's keyring (the `keyring` package).

It is read only by the process that downloads, and never written to a config, a log, a
run folder or a bundle. Without a keyring, huggingface_hub's own HF_TOKEN still works.
"""

from __future__ import annotations

from typing import Any

from studio.core.user_dirs import APP_NAME

KEYRING_USER = "huggingface-token"


class TokenStoreError(RuntimeError):
    """The token cannot be kept or read; the message says why and what to do."""


def _keyring() -> Any:
    try:
        import keyring
        import keyring.errors
    except ImportError:
        raise TokenStoreError("The keyring package is not installed, so the token cannot be kept safely: install it "
                              "(pip install keyring), or set HF_TOKEN in the environment for this session.") from None
    return keyring


def read_token() -> str | None:
    """The stored token, or None when there is none (or no keyring to keep one)."""
    try:
        keyring = _keyring()
    except TokenStoreError:
        return None
    try:
        return keyring.get_password(APP_NAME, KEYRING_USER) or None
    except keyring.errors.KeyringError:  # no backend, or a locked wallet: no token then
        return None


def store_token(token: str) -> None:
    token = token.strip()
    if not token:
        raise TokenStoreError("The token is empty: paste the token from https://huggingface.co/settings/tokens.")
    keyring = _keyring()
    try:
        keyring.set_password(APP_NAME, KEYRING_USER, token)
    except keyring.errors.KeyringError as exc:
        raise TokenStoreError(f"The system keyring refused the token ({exc}): unlock it or set HF_TOKEN in the "
                              "environment instead.") from None


def forget_token() -> bool:
    """Remove the stored token; False when there was none."""
    keyring = _keyring()
    try:
        keyring.delete_password(APP_NAME, KEYRING_USER)
    except keyring.errors.PasswordDeleteError:
        return False
    return True
