"""Print the estimate of a LoRA over each family's full-size base at none / fp8 / int8 / nf4 (for
docs/benchmarks.md).

Run: `python benchmarks/quantized_estimate.py`. Each family's default full-size base, a rank-16 LoRA at its
native resolution, batch 1, bf16, gradient checkpointing, cached latents and captions, no samples, on an
RTX 4090 profile (the figures do not depend on the card), with a dataset of 100 images. Pure Python, no torch.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram
from studio.core.estimate.ram.ram_estimate import estimate_ram
from studio.core.families import FAMILIES
from studio.core.hardware.machine.probe import load_hardware

GPU = load_hardware("rtx4090-24gb").gpus[0]
STORAGE: tuple[tuple[str, dict[str, Any]], ...] = (
    ("bf16", {}), ("fp8", {"fp8_base": True}), ("int8", {"quantized_base": "int8"}), ("nf4", {"quantized_base": "nf4"}))


def config(family: str, model: dict[str, Any]) -> TrainConfig:
    from studio.core.estimate.memory_data import load_architecture

    spec = next(f for f in FAMILIES if f.name == family)
    native = int(load_architecture(spec.architecture("models/base"))["native_resolution"])
    return TrainConfig.model_validate({
        "model": {"family": family, "base": "models/base", **model}, "method": {"kind": "lora", "rank": 16},
        "dataset": {"resolution": native},
        "training": {"mixed_precision": "bf16", "gradient_checkpointing": True, "batch_size": 1,
                     "cache_latents": True, "cache_text_embeddings": True}})


def _quantizing(phases: dict[str, float]) -> str:
    return f"{phases['quantizing'] / 1024:.1f} GB" if "quantizing" in phases else "–"


def table() -> str:
    head = ["Family", "Base", "Denoiser weights", "Training step", "Peak VRAM", "Peak RAM", "RAM while quantizing"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for spec in FAMILIES:
        if "lora" not in spec.methods:
            continue
        for name, model in STORAGE:
            c = config(spec.name, model)
            vram, ram = estimate_vram(c, GPU), estimate_ram(c, GPU, images=100)
            rows.append(f"| {spec.title} ({c.dataset.resolution} px) | {name} | {vram.weights_mb / 1024:.2f} GB | "
                        f"{vram.training_peak_mb / 1024:.1f} GB | {vram.total_gb:.1f} GB | "
                        f"{ram.total_gb:.1f} GB ({ram.phase}) | {_quantizing(ram.phases)} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
