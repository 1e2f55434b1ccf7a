"""FLUX.2 [klein]: which of its two sizes a base model is, and the hub models of each (no torch).

The 4B and the 9B are separate architectures (a LoRA of one does not load on the other), so
the estimate reads `resources/architectures/flux2-klein-<size>.json` for the size the config's
base model is: a model folder says so in its transformer's config (the text width, three Qwen3
layers: 7,680 for the 4B, 12,288 for the 9B), a hub id by its name.
"""

from __future__ import annotations

import json
from pathlib import Path

FAMILY = "flux2-klein"
SIZES = ("4b", "9b")
# The undistilled base models are the ones to train; the distilled ones sample in 4 steps.
BASE_MODELS = {"4b": "black-forest-labs/FLUX.2-klein-base-4B", "9b": "black-forest-labs/FLUX.2-klein-base-9B"}
# The transformer's joint_attention_dim of each size.
TEXT_WIDTHS = {7680: "4b", 12288: "9b"}
# Rough sizes for a bundle's free-disk check: transformer parameters (billions), hub download (GB, bf16).
DENOISER_BILLIONS = {"4b": 3.9, "9b": 9.1}
DOWNLOAD_GB = {"4b": 16.0, "9b": 35.0}


def size_of(base: str) -> str:
    """"4b" or "9b": from a model folder's transformer config, else from the name (the 4B when it says neither)."""
    config = Path(base).expanduser() / "transformer" / "config.json"
    try:
        width = json.loads(config.read_text(encoding="utf-8")).get("joint_attention_dim")
    except (OSError, ValueError, AttributeError):
        width = None
    if isinstance(width, int) and width in TEXT_WIDTHS:
        return TEXT_WIDTHS[width]
    return "9b" if "9b" in base.lower() else "4b"


def architecture_name(family: str, base: str) -> str:
    """The file name (without .json) of the counted architecture a config's base model has."""
    return f"{FAMILY}-{size_of(base)}" if family == FAMILY else family
