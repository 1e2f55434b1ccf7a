"""Measure peak VRAM of SD1.5 / SDXL / SD3-medium LoRA training steps and compare with the estimate.

Run on a CUDA machine: `python benchmarks/gpu_memory.py [--steps 3] [--json OUT]`.

Each case runs in a fresh subprocess (so one case's cache or OOM cannot skew the
next): the full-size denoiser with random weights in fp16, a rank-16 LoRA,
fp16 autocast, AdamW, the native resolution, batch 1, with and without gradient
checkpointing, latents and text embeddings given (as when both are cached).
Peak = torch.cuda.max_memory_reserved() plus the CUDA context (what nvidia-smi
shows for the process minus the reserved pool at the end). Prints a markdown
table of estimate vs measured for docs/benchmarks.md.

The figures set the GPU terms of resources/architectures/calibration.json:
`context_mb` -> cuda_context_mb, `max_reserved_mb / max_allocated_mb - 1` of
the dynamic part -> allocator_fraction. The `vae` cases check the meta-device
count of the fp32 VAE encoder's peak (`transients_mb.vae_encode_fp32`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
CASES = [(family, gc) for family in ("sd15", "sdxl", "sd3") for gc in (False, True)]
VAE_CASES = ("sd15", "sd3")
MB = 2**20


def child(family: str, checkpointing: bool, steps: int) -> dict[str, Any]:
    import torch
    from count_parameters import (  # type: ignore[import-not-found]
        LORA_TARGETS,
        NATIVE_RESOLUTION,
        SPECS,
        _inputs,
        build,
    )
    from peft import LoraConfig

    device = torch.device("cuda")
    torch.cuda.init()
    torch.zeros(1, device=device)
    name = next(n for n, spec in SPECS[family].items() if spec[2] == "denoiser")
    class_name, config, _ = SPECS[family][name]
    model = build(class_name, config).to_empty(device=device)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
        for b in model.buffers():
            b.zero_()
    model.to(torch.float16).requires_grad_(False)
    targets = LORA_TARGETS[family]
    model.add_adapter(LoraConfig(r=16, lora_alpha=16, init_lora_weights="gaussian", target_modules=list(targets)))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()  # LoRA weights train in fp32, as the studio's trainer keeps them
    if checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        args, kwargs = _inputs(family, NATIVE_RESOLUTION[family], torch.float16)
        args = tuple(torch.randn(a.shape, device=device, dtype=a.dtype) if a.dtype.is_floating_point
                     else torch.full(a.shape, 500, device=device) for a in args)
        kwargs = {k: (torch.randn(v.shape, device=device, dtype=v.dtype) if isinstance(v, torch.Tensor)
                      else {kk: torch.randn(vv.shape, device=device, dtype=vv.dtype) for kk, vv in v.items()})
                  for k, v in kwargs.items()}
        if "timestep" in kwargs:
            kwargs["timestep"] = torch.full((1,), 500.0, device=device)
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(*args, **kwargs)
            pred = out.sample if hasattr(out, "sample") else out[0]
        loss = pred.float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    free, total = torch.cuda.mem_get_info()
    reserved_now = torch.cuda.memory_reserved()
    # Whatever the device has in use beyond torch's pool belongs to the context (this process is alone).
    context = max(0, (total - free) - reserved_now)
    return {"family": family, "checkpointing": checkpointing,
            "max_allocated_mb": torch.cuda.max_memory_allocated() / MB,
            "max_reserved_mb": torch.cuda.max_memory_reserved() / MB,
            "context_mb": context / MB, "peak_mb": (torch.cuda.max_memory_reserved() + context) / MB,
            "step_s": sorted(times)[len(times) // 2], "gpu": torch.cuda.get_device_name(0),
            "torch": torch.__version__}


def vae_child(family: str) -> dict[str, Any]:
    """Peak allocated over the weights of an fp32 VAE encode at the native size, batch 1, no grad."""
    import torch
    from count_parameters import NATIVE_RESOLUTION, SPECS, build  # type: ignore[import-not-found]

    device = torch.device("cuda")
    class_name, config, _ = SPECS[family]["vae"]
    vae = build(class_name, config).to_empty(device=device).float()
    with torch.no_grad():
        for p in vae.parameters():
            p.normal_(0.0, 0.02)
    side = NATIVE_RESOLUTION[family]
    pixels = torch.randn(1, 3, side, side, device=device)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        vae.encode(pixels).latent_dist.mode()
    torch.cuda.synchronize()
    stored = json.loads((REPO / "resources" / "architectures" / f"{family}.json").read_text())
    return {"family": family, "case": "vae_encode_fp32", "resolution": side,
            "measured_mb": (torch.cuda.max_memory_allocated() - base) / MB,
            "counted_mb": stored["transients_mb"]["vae_encode_fp32"], "gpu": torch.cuda.get_device_name(0)}


def estimate(family: str, checkpointing: bool, gpu_total_mb: int) -> float:
    from studio.core.config.files.paths import NO_FOLDER, resolve_paths
    from studio.core.config.schema import TrainConfig
    from studio.core.estimate.estimate import estimate_vram
    from studio.core.hardware.report import GPUInfo

    resolution = {"sd15": 512, "sdxl": 1024, "sd3": 1024}[family]
    config = TrainConfig.model_validate({
        "model": {"family": family, "base": "random", "dtype": "fp16",
                  "vae": "fp16-fix" if family == "sdxl" else None},
        "method": {"kind": "lora", "rank": 16}, "dataset": {"resolution": resolution},
        "training": {"batch_size": 1, "mixed_precision": "fp16", "gradient_checkpointing": checkpointing,
                     "cache_latents": True, "cache_text_embeddings": True, "optimizer": "adamw"},
    })
    gpu = GPUInfo(index=0, name="bench", total_mb=gpu_total_mb, free_mb=gpu_total_mb)
    return estimate_vram(resolve_paths(config, NO_FOLDER), gpu).total_mb


def child_row(cmd: list[str], timeout: float, case: dict[str, Any]) -> dict[str, Any]:
    """The RESULT a case's subprocess prints; `case` with the error when it fails or runs past `timeout`."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {**case, "error": f"timed out after {timeout:.0f} s"}
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    return json.loads(line[7:]) if line else {**case, "error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]}


def note(rows: list[dict[str, Any]], path: Path | None) -> None:
    """The rows so far, on stderr and in --json: a call cut short keeps the cases that finished."""
    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if path is not None:
        path.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("FAMILY", "GC"), help=argparse.SUPPRESS)
    parser.add_argument("--vae-child", metavar="FAMILY", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=240, help="seconds per case")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.vae_child:
        print("RESULT " + json.dumps(vae_child(args.vae_child)), flush=True)
        return 0
    if args.child:
        try:
            result = child(args.child[0], args.child[1] == "1", args.steps)
        except Exception as exc:  # an OOM or a CUDA error is a result too
            result = {"family": args.child[0], "checkpointing": args.child[1] == "1",
                      "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    rows: list[dict[str, Any]] = []
    for family, gc in CASES:
        cmd = [sys.executable, __file__, "--child", family, "1" if gc else "0", "--steps", str(args.steps)]
        rows.append(child_row(cmd, args.timeout, {"family": family, "checkpointing": gc}))
        note(rows, args.json)
    for family in VAE_CASES:
        cmd = [sys.executable, __file__, "--vae-child", family]
        rows.append(child_row(cmd, args.timeout, {"family": family, "case": "vae_encode_fp32"}))
        note(rows, args.json)
    import torch

    total_mb = int(torch.cuda.get_device_properties(0).total_memory / MB) if torch.cuda.is_available() else 81920
    print("| model | checkpointing | estimate GB | measured GB (reserved + context) | max allocated GB | error | step s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if row.get("case") == "vae_encode_fp32":
            continue
        est = estimate(row["family"], row["checkpointing"], total_mb) / 1024
        if "error" in row:
            print(f"| {row['family']} | {row['checkpointing']} | {est:.2f} | {row['error']} | | | |")
            continue
        measured = row["peak_mb"] / 1024
        print(f"| {row['family']} | {row['checkpointing']} | {est:.2f} | {measured:.2f} | "
              f"{row['max_allocated_mb'] / 1024:.2f} | {est / measured - 1:+.0%} | {row['step_s']:.2f} |")
        print(f"|   context {row['context_mb']:.0f} MB, reserved/allocated at the peak "
              f"{row['max_reserved_mb'] / row['max_allocated_mb']:.3f} | | | | | | |")
    for row in rows:
        if row.get("case") == "vae_encode_fp32":
            print(f"VAE encode fp32 {row['family']}: " + (row["error"] if "error" in row else
                  f"measured {row['measured_mb']:.0f} MB, counted on meta {row['counted_mb']:.0f} MB"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
