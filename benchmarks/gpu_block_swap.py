"""Block swap on one GPU (model.blocks_to_swap): what it saves, what it costs, and that it changes nothing.

The bare SD3-medium LoRA step (full-size architecture, random weights, nothing downloaded; 1024 px, batch 1,
bf16 autocast, frozen bf16 weights, LoRA rank 16, AdamW: `gpu_train_speed.py`'s bare step) with none, half and
all but two of its 24 blocks swapped (`studio/train/memory/block_swap.py`), with and without gradient
checkpointing. Reported per case: s/step, peak VRAM of the steps, the swapped weights' GB, and the largest
difference of its losses from the unswapped run's (the same seed, inputs and LoRA start). The estimate's
figure to hold it against: the copies take 2 x swapped GB / 12 GB/s a step at most
(`studio/core/estimate/block_swap_parts.py`); a step slower than the unswapped one by less than that means the
copies overlapped compute.

On a CUDA machine:  python benchmarks/gpu_block_swap.py --out DIR
On the CPU:         python benchmarks/gpu_block_swap.py --dry-run --out DIR
(the dry run uses the tiny SD3 at 64 px in fp32, a few steps: the same code path, none of the figures).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_train_speed as speed
from bare_step import bare_step

from studio.core.families import family
from studio.train.memory.block_swap import swap_blocks
from studio.train.memory.grad_checkpointing import enable_gradient_checkpointing

FAMILY = "sd3"


def measure(swapped: int, checkpointing: bool, dry_run: bool, warmup: int, steps: int, work: Path) -> dict[str, Any]:
    device = "cpu" if dry_run else "cuda"
    side = 64 if dry_run else family(FAMILY).native_resolution
    if dry_run:  # built (and seeded) before the step's own seed, so every row starts from the same weights
        speed._tiny_model(FAMILY, work)
    step = bare_step(FAMILY, 1, side, device, dry_run, lambda name: speed._tiny_model(name, work))
    if checkpointing:
        enable_gradient_checkpointing(step.model, 1)
    swap = swap_blocks(step.model, family(FAMILY).checkpointed_blocks, swapped, torch.device(device)) if swapped else None
    try:
        losses: list[float] = []
        start = time.perf_counter()
        for index in range(warmup + steps):
            if index == warmup:
                speed._sync(device)
                speed._reset_peak(device)
                start = time.perf_counter()
            losses.append(float(step.run()))
        speed._sync(device)
        return {"swapped": swapped, "checkpointing": checkpointing, "resolution": side,
                "s_per_step": (time.perf_counter() - start) / steps, "peak_gib": speed._peak_gib(device),
                "swapped_gib": swap.swapped_bytes() / 2**30 if swap else 0.0,
                "most_resident": swap.most_resident if swap else 0, "losses": losses}
    finally:
        if swap is not None:
            swap.unhook()  # its hooks would keep this row's model (and its GPU weights) alive into the next row


def settle(device: str) -> None:
    """After a row: its model freed, and the next row's peak counted from nothing."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| swapped blocks | checkpointing | s/step | peak VRAM GiB | swapped GiB | most on GPU | "
             "largest loss difference |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        peak = "—" if row["peak_gib"] is None else f"{row['peak_gib']:.2f}"
        lines.append(f"| {row['swapped']} | {'yes' if row['checkpointing'] else 'no'} | {row['s_per_step']:.3f} | "
                     f"{peak} | {row['swapped_gib']:.2f} | {row['most_resident']} | {row['loss_difference']:.2e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    counts = (0, 1) if args.dry_run else (0, 12, 22)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpu-block-swap-") as work:  # the dry run's tiny model, removed at the end
        for checkpointing in (True, False):
            plain: list[float] = []
            for swapped in counts:
                row = measure(swapped, checkpointing, args.dry_run, args.warmup, args.steps, Path(work))
                plain = plain or row["losses"]
                row["loss_difference"] = max(abs(a - b) for a, b in zip(row["losses"], plain, strict=True))
                rows.append(row)
                settle("cpu" if args.dry_run else "cuda")
                (args.out / "results.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
                (args.out / "table.md").write_text(table(rows), encoding="utf-8")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
