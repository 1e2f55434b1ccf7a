"""The person's Hugging Face token for a cloud run that downloads its base model on the cluster.

A gated base (SD3 medium, a gated FLUX model) downloads there only with the token of an account that
accepted its licence. The token goes to the launch as a secret of the task (SkyPilot sets it as
HF_TOKEN for setup and run, and keeps it out of what it shows): never into the bundle, sky.yaml,
cloud.json or anything else the studio writes, and never on a command line. A launch whose base is
a gated model the studio knows, with no token here, is refused before any machine is rented.
"""

from __future__ import annotations

from studio.core.app_words import command_or_action
from studio.core.cloud.api import CloudError
from studio.core.models.hub_token import token_for_a_run_elsewhere
from studio.core.models.known import known_gated

TOKEN_ENV = "HF_TOKEN"  # what huggingface_hub reads on the cluster


def launch_secrets(hub_base: str | None) -> dict[str, str]:
    """The secrets a launch gives the cluster: the token when the base downloads from the hub there."""
    token = token_for_a_run_elsewhere() if hub_base else None
    return {TOKEN_ENV: token} if token else {}


def refuse_gated_without_token(hub_base: str | None) -> None:
    """CloudError when the cluster would download a gated base the studio knows, and there is no token here."""
    if not hub_base or not known_gated(hub_base) or token_for_a_run_elsewhere():
        return
    raise CloudError(f"{hub_base} is gated and no Hugging Face token is kept here: the cluster could not download "
                     f"it, after minutes of paid set-up. Accept its licence at https://huggingface.co/{hub_base} "
                     "while signed in, then store a token of that account"
                     + command_or_action(" (`studio-train download --set-token`) or set HF_TOKEN",
                                         " (download it once from the Model & Preset page's model library: it asks "
                                         "for the token)")
                     + ", and launch again")
