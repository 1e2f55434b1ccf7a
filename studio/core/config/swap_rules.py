"""Consistency rules of model.blocks_to_swap (see schema.CONSISTENCY_RULES): how many blocks a family's
denoiser has to swap, and what swapping cannot be combined with.

Which families and methods it acts for is the family declarations' business (`settings.BLOCK_SWAP`); this
adds what needs the architecture or another setting. Each rule raises a `Contradiction` naming the key.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.errors import Contradiction
from studio.core.families import family


def published_blocks(config: Any) -> int | None:
    """How many repeated blocks the config's base model's architecture has (None when it is not counted)."""
    from studio.core.estimate.memory_data import denoiser_entry, load_architecture

    spec = family(config.model.family)
    blocks = denoiser_entry(load_architecture(spec.architecture(config.model.base))).get("blocks")
    return int(blocks) if blocks else None


def check_block_swap(config: Any) -> None:
    count = config.model.blocks_to_swap
    if count == 0:
        return
    blocks = published_blocks(config)
    if blocks is not None and count >= blocks:
        spec = family(config.model.family)
        raise Contradiction("model.blocks_to_swap", count,
                            f"{spec.title}'s denoiser ({spec.architecture(config.model.base)}) has {blocks} blocks; "
                            f"at least one stays on the GPU, so swap at most {blocks - 1}")
    if config.training.compile != "off":
        raise Contradiction("training.compile", config.training.compile,
                            "cannot be combined with model.blocks_to_swap: the compiled blocks would be traced "
                            "with weights that are swapped out; set training.compile = \"off\" or swap no blocks")
