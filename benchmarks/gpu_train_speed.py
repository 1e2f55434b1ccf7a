"""Training speed and peak VRAM of full-size denoisers (random weights) on one GPU.

The architectures are the published SD1.5, SDXL and SD3-medium configurations
(studio/train/pipelines/arch_configs.py); no weights are downloaded. Latents and text
conditioning are random tensors of the real shapes, so this measures the
denoiser's training step alone (forward, backward, AdamW step), in bf16 autocast
with the frozen weights in bf16 for LoRA (rank 16 on the attention projections).

Cases: SD1.5 at 512 px (LoRA and full, batch 1 and 4, with/without gradient
checkpointing), SDXL LoRA at 1024 px batch 1 with and without gradient
checkpointing, SD3-medium LoRA at 1024 px batch 1. Each case runs on its own, and
a failure (out of memory or otherwise) becomes a table row, not the end of the run.
Usage (on a CUDA machine): python benchmarks/gpu_train_speed.py [--steps 20] [--only sdxl sd3]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from studio.train.pipelines.arch_configs import (
    SD3_LORA_TARGETS,
    UNET_LORA_TARGETS,
    build_component,
    denoiser_spec,
)

SD3_TEXT_TOKENS = 77 + 256  # CLIP tokens, then T5 tokens (zeros when T5 is dropped), as the pipeline does


@dataclass(frozen=True)
class Case:
    family: str
    method: str
    resolution: int
    batch: int
    checkpointing: bool


CASES = [
    *(Case("sd15", m, 512, b, gc) for m in ("lora", "full") for b in (1, 4) for gc in (False, True)),
    Case("sdxl", "lora", 1024, 1, False),
    Case("sdxl", "lora", 1024, 1, True),
    Case("sd3", "lora", 1024, 1, True),
    Case("sd3", "lora", 1024, 1, False),
]


def build(case: Case) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from peft import LoraConfig

    _name, class_name, config = denoiser_spec(case.family)
    torch.manual_seed(0)
    model = build_component(class_name, config, "cuda")  # initialised on the GPU: seconds, not minutes
    if case.method == "lora":
        model.requires_grad_(False)
        model.to(dtype=torch.bfloat16)
        targets = SD3_LORA_TARGETS if case.family == "sd3" else UNET_LORA_TARGETS
        model.add_adapter(LoraConfig(r=16, lora_alpha=16, init_lora_weights="gaussian",  # type: ignore[operator]
                                     target_modules=list(targets)))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    if case.checkpointing:
        model.enable_gradient_checkpointing()  # type: ignore[operator]
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=1e-5)


def inputs(case: Case) -> tuple[torch.Tensor, dict[str, Any]]:
    """(latents, keyword arguments of the denoiser) of the real shapes."""
    b, side, cuda = case.batch, case.resolution // 8, {"device": "cuda"}
    if case.family == "sd3":
        latents = torch.randn(b, 16, side, side, **cuda)
        return latents, {"encoder_hidden_states": torch.randn(b, SD3_TEXT_TOKENS, 4096, **cuda),
                         "pooled_projections": torch.randn(b, 2048, **cuda),
                         "timestep": torch.rand(b, **cuda) * 1000}
    latents = torch.randn(b, 4, side, side, **cuda)
    kwargs: dict[str, Any] = {"timestep": torch.randint(0, 1000, (b,), **cuda)}
    if case.family == "sdxl":
        kwargs["encoder_hidden_states"] = torch.randn(b, 77, 2048, **cuda)
        time_ids = torch.tensor([[1024, 1024, 0, 0, 1024, 1024]] * b, dtype=torch.float32, **cuda)
        kwargs["added_cond_kwargs"] = {"text_embeds": torch.randn(b, 1280, **cuda), "time_ids": time_ids}
    else:
        kwargs["encoder_hidden_states"] = torch.randn(b, 77, 768, **cuda)
    return latents, kwargs


def measure(case: Case, steps: int) -> tuple[float, float] | str:
    model: Any = None
    optimizer: Any = None
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    try:
        model, optimizer = build(case)
        latents, kwargs = inputs(case)
        start = time.perf_counter()
        for step in range(steps + 3):
            if step == 3:  # the first steps warm up kernels and the allocator
                torch.cuda.synchronize()
                start = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if case.family == "sd3":
                    out = model(hidden_states=latents, return_dict=False, **kwargs)[0]
                else:
                    out = model(latents, return_dict=False, **kwargs)[0]
            loss = torch.nn.functional.mse_loss(out.float(), latents)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / steps, torch.cuda.max_memory_allocated() / 2**30
    except torch.OutOfMemoryError:
        return "out of memory"
    except Exception as exc:  # one broken case must not hide the others' figures
        return f"failed: {exc.__class__.__name__}: {str(exc).splitlines()[0][:120]}"
    finally:
        del model, optimizer
        gc.collect()
        torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--only", nargs="*", choices=("sd15", "sdxl", "sd3"), help="families to measure")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("this benchmark needs a CUDA GPU", file=sys.stderr)
        return 1
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16 autocast, "
          f"{args.steps} timed steps after 3 warm-up steps\n")
    print("| model | method | resolution | batch | gradient checkpointing | s/it | it/s | peak VRAM (GiB) |")
    print("|---|---|---|---|---|---|---|---|")
    for case in CASES:
        if args.only and case.family not in args.only:
            continue
        result = measure(case, args.steps)
        head = (f"| {case.family} | {case.method} | {case.resolution} | {case.batch} | "
                f"{'on' if case.checkpointing else 'off'} |")
        if isinstance(result, str):
            print(f"{head} {result} | - | - |", flush=True)
        else:
            print(f"{head} {result[0]:.3f} | {1 / result[0]:.2f} | {result[1]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
