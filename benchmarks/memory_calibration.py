"""Check the VRAM estimator against a real training step on the CPU.

Run: `python benchmarks/memory_calibration.py [--resolution 256] [--json OUT]`.

Each case runs in a fresh subprocess: a real-size SD1.5 UNet (860 M parameters,
random weights, fp32) gets a LoRA, and a few training steps (forward, backward,
AdamW step) run at 256 px, batch 1. The child's peak RSS is compared with the
estimator's CPU-mode estimate for the same config (everything fp32, latents and
text embeddings given, as the UNet alone is run). The estimate must land within
20% of the measured peak. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
TOLERANCE = 0.20


def _rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss / 2**20)


def child(resolution: int, checkpointing: bool, rank: int, steps: int) -> dict[str, Any]:
    """One measured run; returns the stages' RSS and the peak, in MB."""
    import torch
    from count_parameters import SD15_UNET, UNET_LORA_TARGETS  # type: ignore[import-not-found]
    from diffusers import UNet2DConditionModel
    from peft import LoraConfig

    torch.manual_seed(0)
    stages = {"runtime": _rss_mb()}
    with torch.device("meta"):
        unet = UNet2DConditionModel(**SD15_UNET)
    unet = unet.to_empty(device="cpu")
    with torch.no_grad():
        for p in unet.parameters():
            p.normal_(0.0, 0.02)  # Random weights, every page touched so RSS counts it.
        for b in unet.buffers():
            b.zero_()
    unet.requires_grad_(False)
    unet.add_adapter(LoraConfig(r=rank, lora_alpha=rank, init_lora_weights="gaussian",
                                target_modules=list(UNET_LORA_TARGETS)))
    if checkpointing:
        unet.enable_gradient_checkpointing()
    unet.train()
    params = [p for p in unet.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    stages["weights"] = _rss_mb()
    side = resolution // 8
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        latents = torch.randn(1, 4, side, side)
        noise = torch.randn_like(latents)
        text = torch.randn(1, 77, 768)
        t = torch.randint(0, 1000, (1,))
        pred = unet(latents + noise, t, text).sample
        loss = torch.nn.functional.mse_loss(pred, noise)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    stages["after_steps"] = _rss_mb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"stages_mb": stages, "peak_mb": peak, "trainable": sum(p.numel() for p in params),
            "step_s": sorted(times)[len(times) // 2], "torch": torch.__version__}


def run_case(resolution: int, checkpointing: bool, rank: int, steps: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--resolution", str(resolution), "--rank", str(rank),
           "--steps", str(steps)] + (["--checkpointing"] if checkpointing else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise RuntimeError(f"measurement failed (exit {out.returncode}):\n{out.stderr[-3000:]}")


def estimate_for(resolution: int, checkpointing: bool, rank: int) -> dict[str, Any]:
    from studio.core.config.files.paths import NO_FOLDER, resolve_paths
    from studio.core.config.schema import TrainConfig
    from studio.core.estimate.estimate import estimate_vram

    config = TrainConfig.model_validate({
        "model": {"family": "sd15", "base": "random", "dtype": "fp32"},
        "method": {"kind": "lora", "rank": rank},
        "dataset": {"resolution": resolution},
        "training": {"batch_size": 1, "mixed_precision": "no", "gradient_checkpointing": checkpointing,
                     "cache_latents": True, "cache_text_embeddings": True, "optimizer": "adamw"},
        "launch": {"cpu": True},
    })
    return estimate_vram(resolve_paths(config, NO_FOLDER), None).to_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--resolution", type=int, default=256)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--checkpointing", action="store_true", help="(child) gradient checkpointing")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.child:
        result = child(args.resolution, args.checkpointing, args.rank, args.steps)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    rows = []
    failed = False
    for gc in (False, True):
        measured = run_case(args.resolution, gc, args.rank, args.steps)
        estimate = estimate_for(args.resolution, gc, args.rank)
        error = estimate["total_mb"] / measured["peak_mb"] - 1
        failed |= abs(error) > TOLERANCE
        rows.append({"checkpointing": gc, "measured": measured, "estimate": estimate, "error": error})
        print(f"SD1.5 LoRA r{args.rank} fp32 CPU {args.resolution}px b1 gc={gc}: measured peak RSS "
              f"{measured['peak_mb']:,.0f} MB (runtime {measured['stages_mb']['runtime']:,.0f}, after weights "
              f"{measured['stages_mb']['weights']:,.0f}), estimate {estimate['total_mb']:,.0f} MB "
              f"({error:+.1%}), step {measured['step_s']:.1f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    if failed:
        print(f"FAIL: an estimate is off by more than {TOLERANCE:.0%}")
        return 1
    print(f"OK: every estimate within {TOLERANCE:.0%} of the measured peak")
    return 0


if __name__ == "__main__":
    sys.exit(main())
