"""Measure the system RAM a training process holds before any model is loaded (the RAM estimate's baseline).

Run: `python benchmarks/ram_baseline.py [--out FILE]` on a machine with the training environment.

It reads the process's resident memory (VmRSS, and RssAnon: the private part that swapping or an
out-of-memory kill counts) after each stage a trainer goes through before its first model file:
the interpreter, `import torch`, the CUDA context, a cuBLAS matrix product, a cuDNN convolution,
scaled-dot-product attention in bf16, and the training libraries (transformers, accelerate, peft,
diffusers where installed). The last figure is what `resources/architectures/ram.json` calls
`baseline_mb`; on the CPU only the imports are measured. Linux only (reads /proc/self/status).
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
from pathlib import Path
from typing import Any


def _status_mb() -> dict[str, float]:
    values: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            values[key] = round(int(rest.split()[0]) / 1024, 1)
    return values


def measure() -> dict[str, Any]:
    stages: list[dict[str, Any]] = [{"stage": "python", **_status_mb()}]
    import torch

    stages.append({"stage": "import torch", **_status_mb()})
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.zeros(1, device=device)
        stages.append({"stage": "CUDA context", **_status_mb()})
    a = torch.randn(1024, 1024, device=device, dtype=torch.bfloat16)
    (a @ a).sum().item()
    stages.append({"stage": "matmul (cuBLAS)" if cuda else "matmul", **_status_mb()})
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).to(device, torch.bfloat16)
    conv(torch.randn(1, 64, 128, 128, device=device, dtype=torch.bfloat16)).sum().item()
    stages.append({"stage": "conv2d (cuDNN)" if cuda else "conv2d", **_status_mb()})
    q = torch.randn(1, 8, 1024, 64, device=device, dtype=torch.bfloat16)
    torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().item()
    stages.append({"stage": "attention (SDPA)", **_status_mb()})
    present = []
    for name in ("transformers", "accelerate", "peft", "diffusers", "safetensors"):
        try:
            importlib.import_module(name)
            present.append(name)
        except ImportError:
            pass
    stages.append({"stage": "libraries: " + ", ".join(present), **_status_mb()})
    return {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "stages": stages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()
    result = measure()
    for stage in result["stages"]:
        print(f"{stage['stage']:<45} RSS {stage.get('VmRSS', 0):>8.0f} MB  private {stage.get('RssAnon', 0):>8.0f} MB")
    print(f"torch {result['torch']} on {result['device']} ({result['platform']})")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
