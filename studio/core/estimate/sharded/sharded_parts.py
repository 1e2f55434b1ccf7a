"""The memory parts of a sharded run (`launch.strategy = "fsdp"`) beyond each GPU's shares.

Each GPU of a sharded run holds 1/N of the trained weights, of their gradients and of the
optimizer state (`memory_parts.py` divides those parts by `RunFacts.shards`). What FSDP keeps
whole is counted here: the root unit (the embeddings, first and last layers outside every
block) for the whole step, the unit running and the one gathered ahead of it, and one unit's
gradients on their way to the reduce-scatter. The unit sizes come from the architecture data
(`resources/architectures/<family>.json`, "fsdp"), grouped as the trainer groups them.

Before the weights are sharded, every GPU loads the whole model (the loading peak).
"""

from __future__ import annotations

from typing import Any

from studio.core.estimate.memory_data import BYTES, MB
from studio.core.estimate.memory_parts import MemoryPart, RunFacts


def trained_components(f: RunFacts) -> list[dict[str, Any]]:
    """The architecture entries of the modules a full fine-tune trains (the denoiser, CLIP encoders if asked)."""
    train_text = f.config.method.train_text_encoder
    return [c for c in f.arch["components"].values()
            if c["role"] == "denoiser" or (train_text and c["role"].startswith("text_encoder") and "fsdp" in c)]


def _gathered_width(f: RunFacts) -> int:
    """Bytes per gathered weight: bf16 under bf16 mixed precision, else fp32."""
    return BYTES["bf16"] if f.config.training.mixed_precision == "bf16" else BYTES["fp32"]


def _units(f: RunFacts) -> tuple[int, int]:
    """(root parameters of every trained module, parameters of the largest unit)."""
    groups = [c["fsdp"] for c in trained_components(f)]
    return sum(int(g["root_params"]) for g in groups), max(int(g["largest_unit_params"]) for g in groups)


def gathered_units(f: RunFacts) -> MemoryPart | None:
    """Weights FSDP gathers whole: every root for the step, and two units (one running, one prefetched)."""
    if f.shards <= 1:
        return None
    root, largest = _units(f)
    width = _gathered_width(f)
    return MemoryPart("fsdp_gathered", "Gathered weights (FSDP)", (root + 2 * largest) * width / MB,
                      f"the root units' {root / 1e6:,.0f} M parameters for the whole step, and the block running "
                      f"with the next ({largest / 1e6:,.0f} M each), {width * 8}-bit")


def communication_buffers(f: RunFacts) -> MemoryPart | None:
    """One unit's unsharded gradients and their fp32 copy for the reduce-scatter."""
    if f.shards <= 1:
        return None
    _root, largest = _units(f)
    width = _gathered_width(f)
    return MemoryPart("fsdp_buffers", "Communication buffers (FSDP)", largest * (width + 4) / MB,
                      "one block's whole gradients and their fp32 reduce-scatter copy")


def fsdp_parts(f: RunFacts) -> list[MemoryPart]:
    return [p for p in (gathered_units(f), communication_buffers(f)) if p is not None]


def loading_peak(f: RunFacts, overhead_mb: float, frozen_mb: float) -> float:
    """Before sharding, each GPU loads the whole model: the trained modules in fp32 and the frozen ones
    (`frozen_mb`: every encoder in the frozen dtype and the VAE; the trained encoders are taken out of it)."""
    if f.shards <= 1:
        return 0.0
    trained = trained_components(f)
    params = sum(int(c["params"]) for c in trained)
    encoders = sum(int(c["params"]) for c in trained if c["role"] != "denoiser")
    return overhead_mb + params * 4 / MB + frozen_mb - encoders * BYTES[f.frozen] / MB
