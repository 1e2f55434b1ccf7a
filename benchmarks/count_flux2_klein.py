"""Count the parameters and activations of the real FLUX.2 [klein] 4B and 9B architectures.

Run: `python benchmarks/count_flux2_klein.py` (writes resources/architectures/flux2-klein-4b.json
and -9b.json). The same counts as `count_parameters.py` makes for SD1.5/SDXL/SD3, on the meta
device from the published configurations (`studio/train/pipelines/flux2_klein.py`): the bytes
autograd keeps for backward in one forward at 1024 px (4,096 image tokens and the pipeline's
512 text tokens), with and without checkpointing, and the transient peaks of the VAE, the Qwen3
encoder and the sampling forward. `tests/train/test_flux2_klein_architecture.py` recomputes the
parameter counts and compares.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from count_parameters import PRECISIONS, SavedBytes, _counting, _MixedPrecision, fsdp_units, lora_targets
from meta_memory import flash_attention, live_bytes, peak_bytes

from studio.core.config.sharding import DENOISER_UNITS
from studio.train.pipelines.flux2_klein import VARIANTS, full_size_components

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "resources" / "architectures"
FAMILY = "flux2-klein"
RESOLUTION = 1024
TEXT_TOKENS = 512
LATENT_CHANNELS = 128  # 32 VAE channels, patchified 2x2
# The adapter's default targets (diffusers' [klein] example): the double blocks' image attention and
# the single blocks' two fused projections.
LORA_TARGETS = ("to_k", "to_q", "to_v", "to_out.0", "to_qkv_mlp_proj", "attn.to_out")


def _lora_linear_targets(model: nn.Module) -> list[str]:
    """The Linear modules the adapter wraps (a double block's attn.to_out is a list, not a layer)."""
    return [name for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and any(name == t or name.endswith("." + t) for t in LORA_TARGETS)]


def _inputs(transformer: nn.Module, batch: int, dtype: torch.dtype) -> dict[str, Any]:
    from diffusers import Flux2KleinPipeline

    side = RESOLUTION // 16
    latents = torch.empty(batch, LATENT_CHANNELS, side, side, device="meta", dtype=dtype)
    embeds = torch.empty(batch, TEXT_TOKENS, transformer.config.joint_attention_dim, device="meta", dtype=dtype)
    img_ids = Flux2KleinPipeline._prepare_latent_ids(torch.empty(batch, 1, side, side))
    txt_ids = Flux2KleinPipeline._prepare_text_ids(torch.empty(batch, TEXT_TOKENS, 1))
    return {"hidden_states": Flux2KleinPipeline._pack_latents(latents), "encoder_hidden_states": embeds,
            "timestep": torch.ones(batch, device="meta", dtype=dtype), "img_ids": img_ids.to("meta"),
            "txt_ids": txt_ids.to("meta"), "guidance": None, "return_dict": False}


def _transformer(variant: str, dtype: torch.dtype, method: str) -> nn.Module:
    model = full_size_components(variant)["transformer"].to(dtype)
    model.requires_grad_(method == "full")
    if method == "lora":
        from peft import LoraConfig

        model.add_adapter(LoraConfig(r=16, lora_alpha=16, target_modules=_lora_linear_targets(model)))  # type: ignore[operator]
    return model


def activation_bytes(variant: str, method: str, checkpointing: bool, precision: str) -> int:
    """Bytes held for backward after one forward at batch 1 (checkpointing: what survives, plus the
    largest recomputed block)."""
    dtype = torch.float32 if precision == "fp32" else torch.float16
    weights = torch.float32 if precision == "fp32" or (precision == "mixed" and method == "full") else dtype
    model = _transformer(variant, weights, method)
    params = {id(p) for p in model.parameters()}
    counter = SavedBytes(params)
    blocks: list[int] = []
    inputs: dict[int, torch.Tensor] = {}

    def fake_checkpoint(module: Callable[..., Any], *args: Any) -> Any:
        for a in args:
            if isinstance(a, torch.Tensor):
                inputs[id(a)] = a
        inner = SavedBytes(params)
        with _counting(inner):
            out = module(*args)
        blocks.append(inner.total)
        return out

    if checkpointing:
        model.enable_gradient_checkpointing(gradient_checkpointing_func=fake_checkpoint)  # type: ignore[operator]
    kwargs = _inputs(model, 1, dtype)
    mixed = _MixedPrecision() if precision == "mixed" else None
    try:
        if mixed:
            mixed.__enter__()
        with flash_attention(), _counting(counter):
            model(**kwargs)
    finally:
        if mixed:
            mixed.__exit__()
    extra = sum(t.numel() * t.element_size() for i, t in inputs.items() if i not in counter.seen)
    return counter.total + extra + (max(blocks) if blocks else 0)


def training_step_bytes(variant: str, checkpointing: bool) -> int:
    """Peak live bytes over the weights of one LoRA step under fp16 autocast."""
    model = _transformer(variant, torch.float16, "lora")
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    if checkpointing:
        model.enable_gradient_checkpointing()  # type: ignore[operator]
    model.train()
    kwargs = _inputs(model, 1, torch.float16)
    mixed = _MixedPrecision()
    mixed.__enter__()
    try:
        with flash_attention(), live_bytes() as mode:
            out = model(**kwargs)[0]
            loss = out.float().pow(2).mean()
            del out
            loss.backward()
            del loss
    finally:
        mixed.__exit__()
    return mode.peak


def transient_bytes(variant: str) -> dict[str, int]:
    parts = full_size_components(variant)
    vae = parts["vae"].to(torch.float32)
    pixels = torch.empty(1, 3, RESOLUTION, RESOLUTION, device="meta")
    latents = torch.empty(1, 32, RESOLUTION // 8, RESOLUTION // 8, device="meta")
    denoiser = parts["transformer"].to(torch.float16)
    encoder = parts["text_encoder"].to(torch.float16)
    ids = torch.zeros(1, TEXT_TOKENS, dtype=torch.long, device="meta")
    # A ready 4-D causal mask: transformers would otherwise look at the mask's values to build one,
    # which the meta device cannot (the pipeline's padded prompt costs the same either way).
    causal = torch.ones(1, 1, TEXT_TOKENS, TEXT_TOKENS, dtype=torch.bool, device="meta")
    kwargs = _inputs(denoiser, 2, torch.float16)
    with torch.no_grad(), flash_attention():
        return {
            "vae_encode_fp32": peak_bytes(lambda: vae.encode(pixels).latent_dist.mode()),  # type: ignore[operator]
            "vae_decode_fp32": peak_bytes(lambda: vae.decode(latents).sample),  # type: ignore[operator]
            "denoiser_sampling_fp16": peak_bytes(lambda: denoiser(**kwargs)),
            "text_encoder_fp16": peak_bytes(lambda: encoder(input_ids=ids, attention_mask=causal,
                                                            output_hidden_states=True, use_cache=False)),
        }


def _component(name: str, model: nn.Module) -> dict[str, Any]:
    roles = {"transformer": "denoiser", "vae": "vae", "text_encoder": "text_encoder"}
    entry: dict[str, Any] = {"class": type(model).__name__, "role": roles[name],
                             "params": sum(p.numel() for p in model.parameters())}
    floating = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    if floating:
        entry["float_buffers"] = floating
    if name == "transformer":
        blocks = model.transformer_blocks  # type: ignore[union-attr]
        singles = model.single_transformer_blocks  # type: ignore[union-attr]
        entry["blocks"] = len(blocks) + len(singles)
        entry["lora_targets"] = lora_targets(model, tuple(_lora_linear_targets(model)))
        entry["lora_targets"]["modules"] = list(LORA_TARGETS)
        entry["largest_layer_params"] = max(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
        entry["fsdp"] = fsdp_units(model, DENOISER_UNITS[FAMILY])
    if name == "vae":
        entry["encoder_params"] = sum(p.numel() for n, p in model.named_parameters()
                                      if n.startswith(("encoder.", "quant_conv.")))
    return entry


def count_variant(variant: str, activations: bool = True) -> dict[str, Any]:
    import diffusers
    import transformers

    data: dict[str, Any] = {
        "family": FAMILY, "size": variant,
        "generated_by": "benchmarks/count_flux2_klein.py",
        "library_versions": {"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                             "transformers": transformers.__version__},
        "native_resolution": RESOLUTION, "latent_channels": LATENT_CHANNELS, "text_tokens": TEXT_TOKENS,
        "components": {name: _component(name, model) for name, model in full_size_components(variant).items()},
    }
    if activations:
        mb = 1024 * 1024
        data["activations_mb"] = {
            "resolution": RESOLUTION, "batch": 1,
            "note": "bytes saved for backward in one forward pass at batch 1, flash attention",
            **{f"{method}{'_checkpointing' if gc else ''}_{precision}":
               round(activation_bytes(variant, method, gc, precision) / mb, 1)
               for method in ("lora", "full") for gc in (False, True) for precision in PRECISIONS},
        }
        data["transients_mb"] = {
            "resolution": RESOLUTION, "batch": 1,
            "note": "peak live bytes over the weights, counted on the meta device (benchmarks/meta_memory.py)",
            **{k: round(v / mb, 1) for k, v in transient_bytes(variant).items()},
            **{f"lora_step{'_checkpointing' if gc else ''}_mixed": round(training_step_bytes(variant, gc) / mb, 1)
               for gc in (False, True)},
        }
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", help="4b, 9b (default: both)")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    for variant in args.sizes or VARIANTS:
        if variant not in VARIANTS:
            parser.error(f"unknown size {variant!r}; choose from {', '.join(VARIANTS)}")
        data = count_variant(variant)
        path = args.out / f"{FAMILY}-{variant}.json"
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        total = sum(c["params"] for c in data["components"].values())
        print(f"{FAMILY}-{variant}: {total / 1e6:,.1f} M parameters -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
