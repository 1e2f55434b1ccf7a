"""What a person gives where a hub id goes, when it is none: a link copied from the browser, a folder, a name with
a space."""

from __future__ import annotations

import re

_LINK = re.compile(r"https?://(?:www\.)?(?:huggingface\.co|hf\.co)/([^/?#]+/[^/?#]+)")


def not_a_hub_id(given: str) -> str:
    """The line that says `given` is no hub id, what to give instead (a link's own org/name), and that a model
    already on this machine needs no download."""
    link = _LINK.match(given)
    hint = f" (this link's id is {link.group(1)})" if link else ""
    return (f"{given} is not a hub id: give the id as the model's hub page writes it, org/name, "
            f"e.g. stabilityai/stable-diffusion-xl-base-1.0{hint}; a model already on this "
            "machine needs no download: set its folder or file as model.base")
