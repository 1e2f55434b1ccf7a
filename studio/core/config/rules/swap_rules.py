"""Consistency rules of model.blocks_to_swap (see schema.CONSISTENCY_RULES): how many blocks a family's
denoiser has to swap, and what swapping cannot be combined with.

Which families and methods it acts for is the family declarations' business (`settings.BLOCK_SWAP`); this
adds what needs the architecture or another setting. Each rule raises a `Contradiction` naming the key.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from studio.core.config.errors import Contradiction
from studio.core.families import family
from studio.core.resources import resource_path


@lru_cache(maxsize=16)
def published_blocks(architecture: str) -> int | None:
    """How many repeated blocks a counted architecture's denoiser has (`resources/architectures/<name>.json`);
    None when it is not counted or cannot be read (the estimate reports a damaged install)."""
    try:
        data = json.loads(resource_path("architectures", f"{architecture}.json").read_text(encoding="utf-8"))
        blocks = next(c for c in data["components"].values() if c["role"] == "denoiser").get("blocks")
    except (OSError, ValueError, KeyError, StopIteration, AttributeError, TypeError):
        return None
    return int(blocks) if blocks else None


def check_block_swap(config: Any) -> None:
    count = config.model.blocks_to_swap
    if count == 0:
        return
    spec = family(config.model.family)
    blocks = published_blocks(spec.architecture(config.model.base))
    if blocks is not None and count >= blocks:
        raise Contradiction("model.blocks_to_swap", count,
                            f"{spec.title}'s denoiser ({spec.architecture(config.model.base)}) has {blocks} blocks; "
                            f"at least one stays on the GPU, so swap at most {blocks - 1}")
    if config.training.compile != "off":
        raise Contradiction("training.compile", config.training.compile,
                            "cannot be combined with model.blocks_to_swap: the compiled blocks would be traced "
                            "with weights that are swapped out; set training.compile = \"off\" or swap no blocks")
