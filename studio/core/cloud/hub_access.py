"""The person's Hugging Face token for a cloud run that downloads its base model on the cluster.

A gated base (SD3 medium, a gated FLUX model) downloads there only with the token of an account that
accepted its licence. The token goes to the launch as a secret of the task (SkyPilot sets it as
HF_TOKEN for setup and run, and keeps it out of what it shows): never into the bundle, sky.yaml,
cloud.json or anything else the studio writes, and never on a command line. A launch whose base is
a gated model the studio knows, with no token here, is refused before any machine is rented.
"""

from __future__ import annotations

import os
from pathlib import Path

from studio.core.app_words import command_or_action
from studio.core.cloud.api import CloudError
from studio.core.models.hub_token import read_token
from studio.core.models.known import KnownModelsError, find_known

TOKEN_ENV = "HF_TOKEN"  # what huggingface_hub reads on the cluster


def _hub_login_token() -> str | None:
    """The token of huggingface_hub's own login on this machine (`hf auth login`), read from its file."""
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


def hub_token() -> str | None:
    """The token downloads here use: the one kept in the keyring, else HF_TOKEN, else huggingface_hub's login."""
    return read_token() or os.environ.get(TOKEN_ENV, "").strip() or _hub_login_token()


def launch_secrets(hub_base: str | None) -> dict[str, str]:
    """The secrets a launch gives the cluster: the token when the base downloads from the hub there."""
    token = hub_token() if hub_base else None
    return {TOKEN_ENV: token} if token else {}


def refuse_gated_without_token(hub_base: str | None) -> None:
    """CloudError when the cluster would download a gated base the studio knows, and there is no token here."""
    if not hub_base:
        return
    try:
        known = find_known(hub_base)
    except KnownModelsError:
        return
    if known is None or not known.gated or hub_token():
        return
    raise CloudError(f"{hub_base} is gated and no Hugging Face token is kept here: the cluster could not download "
                     f"it, after minutes of paid set-up. Accept its licence at https://huggingface.co/{hub_base} "
                     "while signed in, then store a token of that account"
                     + command_or_action(" (`studio-train download --set-token`) or set HF_TOKEN",
                                         " (download it once from the Model & Preset page's model library: it asks "
                                         "for the token)")
                     + ", and launch again; nothing was started")
