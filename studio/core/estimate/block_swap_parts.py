"""What model.blocks_to_swap does to a run's memory and speed: GPU memory saved, pinned system memory used,
and the time the copies add to a step.

The per-block size is the average of the denoiser's repeated blocks (its parameters outside the FSDP root,
over its block count: `resources/architectures/<family>.json`), in the frozen weights' width (1 byte with
model.fp8_base). At most two swapped blocks are on the GPU at once (the running one and the next one on its
way), counted as two of the largest block, which is conservative where the swapped blocks are smaller than the
largest (FLUX.2 [klein]'s last blocks are its single-stream ones). The swapped weights live in pinned system
memory for the whole run, in every process on the machine.

Speed: each swapped block crosses the PCIe bus twice per micro-batch (forward, and once more for the backward
pass, whose gradient checkpointing recomputation reuses that copy). The copies overlap the previous block's
compute, so the step slows only where a block's copy outlasts its compute; the figure given is the copy time
itself at `PCIE_GB_S`, an upper bound on the added time (a PCIe 4.0 x16 slot copies pinned memory at about
twice that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from studio.core.estimate.memory_data import BYTES, MB, denoiser_entry
from studio.core.estimate.memory_parts import MemoryPart, RunFacts

# Host-to-GPU copies from pinned memory that a PCIe 3.0 x16 (or 4.0 x8) slot sustains, GB/s.
PCIE_GB_S = 12.0
IN_FLIGHT = 2  # the block running and the next one being copied


class RamPartMaker(Protocol):
    """The RAM estimate's facts (`ram_parts.RamFacts`): the run's, and a part for every process."""

    f: RunFacts

    def part(self, key: str, label: str, mb: float, detail: str, shared: bool = False) -> MemoryPart: ...


@dataclass(frozen=True)
class SwapFigures:
    blocks: int  # swapped
    kept_mb: float  # their weights, in system memory instead of on the GPU
    in_flight_mb: float  # the swapped blocks on the GPU at once
    seconds_per_step: float  # copy time per optimizer step, an upper bound on the slowdown

    @property
    def saved_mb(self) -> float:
        return max(0.0, self.kept_mb - self.in_flight_mb)


# Bytes a weight of a swapped block takes stored quantized (model.quantized_base; scales are a rounding).
QUANTIZED_WIDTH = {"int8": 1.0, "nf4": 0.516}


def swap_figures(f: RunFacts) -> SwapFigures | None:
    """The swap's figures on a GPU (None without one, or when the architecture has no block counts)."""
    count = f.config.model.blocks_to_swap
    den = denoiser_entry(f.arch)
    fsdp, blocks = den.get("fsdp"), den.get("blocks")
    if not count or f.full or not f.gpu or not fsdp or not blocks:
        return None
    width = 1 if f.fp8 else QUANTIZED_WIDTH.get(f.quantized, BYTES[f.frozen])
    # A smaller model of the family (`local_architecture`) has its blocks in the published proportions.
    local = f.arch.get("local_model")
    share = int(den["params"]) / int(local["published_params"]) if local else 1.0
    average = (int(den["params"]) - int(fsdp["root_params"]) * share) / int(blocks)
    kept = count * average * width
    in_flight = min(count, IN_FLIGHT) * int(fsdp["largest_unit_params"]) * share * width
    copies = 2 * f.config.training.gradient_accumulation
    return SwapFigures(count, kept / MB, in_flight / MB, copies * kept / (PCIE_GB_S * 1e9))


def swapped_weights(f: RunFacts, weights: MemoryPart) -> list[MemoryPart]:
    """The denoiser's weights part less the swapped blocks, and the swapped blocks on the GPU at once."""
    swap = swap_figures(f)
    if swap is None:
        return [weights]
    kept = MemoryPart(weights.key, weights.label, weights.mb - swap.kept_mb,
                      f"{weights.detail}; {swap.blocks} blocks ({swap.kept_mb / 1024:.1f} GB) in system memory")
    return [kept, MemoryPart("swap_in_flight", "Swapped blocks on their way", swap.in_flight_mb,
                             f"model.blocks_to_swap: at most {min(swap.blocks, IN_FLIGHT)} of the {swap.blocks} "
                             "swapped blocks on the GPU at once")]


def swap_note(f: RunFacts) -> list[str]:
    """What a person reads about the swap: memory moved and the expected slowdown."""
    swap = swap_figures(f)
    if swap is None:
        return []
    return [f"model.blocks_to_swap: {swap.blocks} blocks ({swap.kept_mb / 1024:.1f} GB) wait in pinned system "
            f"memory, {swap.saved_mb / 1024:.1f} GB less on the GPU; their copies add up to "
            f"{swap.seconds_per_step:.2f} s a step at {PCIE_GB_S:.0f} GB/s (less where they overlap compute)"]


def pinned_blocks(r: RamPartMaker) -> MemoryPart | None:
    """The swapped blocks' weights in system memory for the whole training, in every process."""
    swap = swap_figures(r.f)
    if swap is None:
        return None
    return r.part("swapped_blocks", "Swapped blocks (pinned)", swap.kept_mb,
                  f"model.blocks_to_swap: {swap.blocks} blocks' frozen weights, pinned (the system cannot page "
                  "them out)")
