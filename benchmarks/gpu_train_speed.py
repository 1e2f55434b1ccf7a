"""Training speed and peak VRAM of a full-size SD1.5-architecture UNet (random weights) on one GPU.

The UNet configuration is SD1.5's published one; no weights are downloaded. Latents
and text embeddings are random tensors of the real shapes (512 px -> 64x64 latents,
77x768 CLIP states), so this measures the denoiser's training step alone.
Prints a markdown table: method, batch, gradient checkpointing, it/s, peak VRAM.
Usage (on a CUDA machine): python benchmarks/gpu_train_speed.py [--steps 20]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import torch

SD15_UNET = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "layers_per_block": 2,
    "block_out_channels": (320, 640, 1280, 1280),
    "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
}


def build(method: str, checkpointing: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from diffusers import UNet2DConditionModel
    from peft import LoraConfig

    torch.manual_seed(0)
    unet = UNet2DConditionModel(**SD15_UNET)
    if method == "lora":
        unet.requires_grad_(False)
        unet.to("cuda", dtype=torch.bfloat16)
        unet.add_adapter(LoraConfig(r=16, lora_alpha=16, init_lora_weights="gaussian",
                                    target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
        for p in unet.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    else:
        unet.to("cuda")  # full fine-tune: fp32 master weights, bf16 autocast
    if checkpointing:
        unet.enable_gradient_checkpointing()
    unet.train()
    params = [p for p in unet.parameters() if p.requires_grad]
    return unet, torch.optim.AdamW(params, lr=1e-5)


def measure(method: str, batch: int, checkpointing: bool, steps: int) -> tuple[float, float] | str:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    try:
        unet, optimizer = build(method, checkpointing)
        latents = torch.randn(batch, 4, 64, 64, device="cuda")
        states = torch.randn(batch, 77, 768, device="cuda")
        timesteps = torch.randint(0, 1000, (batch,), device="cuda")
        for step in range(steps + 3):
            if step == 3:  # the first steps warm up kernels and the allocator
                torch.cuda.synchronize()
                start = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = unet(latents, timesteps, encoder_hidden_states=states).sample
            loss = torch.nn.functional.mse_loss(out.float(), latents)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        rate = steps / (time.perf_counter() - start)
        peak = torch.cuda.max_memory_allocated() / 2**30
        del unet, optimizer
        return rate, peak
    except torch.OutOfMemoryError:
        return "out of memory"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("this benchmark needs a CUDA GPU", file=sys.stderr)
        return 1
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, 512 px, {args.steps} steps\n")
    print("| method | batch | gradient checkpointing | it/s | peak VRAM (GiB) |")
    print("|---|---|---|---|---|")
    for method, batch, checkpointing in itertools.product(("lora", "full"), (1, 4), (False, True)):
        result = measure(method, batch, checkpointing, args.steps)
        if isinstance(result, str):
            print(f"| {method} | {batch} | {'on' if checkpointing else 'off'} | {result} | - |", flush=True)
        else:
            print(f"| {method} | {batch} | {'on' if checkpointing else 'off'} | {result[0]:.2f} | {result[1]:.1f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
