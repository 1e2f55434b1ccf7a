"""Count the parameters and activations of a transformer family's real architectures (FLUX.2 [klein], ...).

Run: `python benchmarks/count_transformer_family.py FAMILY [SIZE ...]` (writes
resources/architectures/<family>[-<size>].json). The same counts as `count_parameters.py` makes
for SD1.5/SDXL/SD3, on the meta device from the published configurations that the family's
pipeline module declares (`COUNTING` in `studio/train/pipelines/<family>.py`): the bytes
autograd keeps for backward in one forward at the native resolution (with the pipeline's text
tokens), with and without checkpointing, and the transient peaks of the VAE, the text encoder and
the sampling forward. The family's architecture test recomputes the parameter counts and compares.
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
from counting_parts import PRECISIONS, MixedPrecision, SavedBytes, counting, fsdp_units, lora_targets
from meta_memory import flash_attention, live_bytes, peak_bytes

from studio.core.config.rules.sharding import DENOISER_UNITS
from studio.train.memory.quantized import quantizable
from studio.train.pipelines.counting import Counting, counting_of
from studio.train.pipelines.full_size import parameter_count

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "resources" / "architectures"


def _transformer(spec: Counting, size: str | None, dtype: torch.dtype, method: str) -> nn.Module:
    model = spec.components(size)["transformer"].to(dtype)
    model.requires_grad_(method == "full")
    if method == "lora":
        from peft import LoraConfig

        model.add_adapter(LoraConfig(r=16, lora_alpha=16, target_modules=spec.lora_linear_targets(model)))  # type: ignore[operator]
    return model


def activation_bytes(spec: Counting, size: str | None, method: str, checkpointing: bool, precision: str) -> int:
    """Bytes held for backward after one forward at batch 1 (checkpointing: what survives, plus the
    largest recomputed block)."""
    dtype = torch.float32 if precision == "fp32" else torch.float16
    weights = torch.float32 if precision == "fp32" or (precision == "mixed" and method == "full") else dtype
    model = _transformer(spec, size, weights, method)
    params = {id(p) for p in model.parameters()}
    counter = SavedBytes(params)
    blocks: list[int] = []
    inputs: dict[int, torch.Tensor] = {}

    def fake_checkpoint(module: Callable[..., Any], *args: Any) -> Any:
        for a in args:
            if isinstance(a, torch.Tensor):
                inputs[id(a)] = a
        inner = SavedBytes(params)
        with counting(inner):
            out = module(*args)
        blocks.append(inner.total)
        return out

    if checkpointing:
        model.enable_gradient_checkpointing(gradient_checkpointing_func=fake_checkpoint)  # type: ignore[operator]
    kwargs = spec.inputs(model, 1, dtype)
    mixed = MixedPrecision() if precision == "mixed" else None
    try:
        if mixed:
            mixed.__enter__()
        with flash_attention(), counting(counter):
            model(**kwargs)
    finally:
        if mixed:
            mixed.__exit__()
    extra = sum(t.numel() * t.element_size() for i, t in inputs.items() if i not in counter.seen)
    return counter.total + extra + (max(blocks) if blocks else 0)


def training_step_bytes(spec: Counting, size: str | None, checkpointing: bool) -> int:
    """Peak live bytes over the weights of one LoRA step under fp16 autocast."""
    model = _transformer(spec, size, torch.float16, "lora")
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    if checkpointing:
        model.enable_gradient_checkpointing()  # type: ignore[operator]
    model.train()
    kwargs = spec.inputs(model, 1, torch.float16)
    mixed = MixedPrecision()
    mixed.__enter__()
    try:
        with flash_attention(), live_bytes() as mode:
            out = spec.output(model(**kwargs))
            loss = out.float().pow(2).mean()
            del out
            loss.backward()
            del loss
    finally:
        mixed.__exit__()
    return mode.peak


def transient_bytes(spec: Counting, size: str | None) -> dict[str, int]:
    parts = spec.components(size)
    side = spec.resolution
    vae = parts["vae"].to(torch.float32)
    pixels = torch.empty(1, 3, side, side, device="meta")
    latents = torch.empty(1, spec.vae_channels, side // 8, side // 8, device="meta")
    denoiser = parts["transformer"].to(torch.float16)
    encoder = parts["text_encoder"].to(torch.float16)
    ids = torch.zeros(1, spec.text_tokens, dtype=torch.long, device="meta")
    # A ready 4-D causal mask: transformers would otherwise look at the mask's values to build one,
    # which the meta device cannot (the pipeline's padded prompt costs the same either way).
    causal = torch.ones(1, 1, spec.text_tokens, spec.text_tokens, dtype=torch.bool, device="meta")
    kwargs = spec.inputs(denoiser, 2, torch.float16)
    with torch.no_grad(), flash_attention():
        return {
            "vae_encode_fp32": peak_bytes(lambda: vae.encode(pixels).latent_dist.mode()),  # type: ignore[operator]
            "vae_decode_fp32": peak_bytes(lambda: vae.decode(latents).sample),  # type: ignore[operator]
            "denoiser_sampling_fp16": peak_bytes(lambda: denoiser(**kwargs)),
            "text_encoder_fp16": peak_bytes(lambda: spec.text_encoder(encoder, ids, causal)),
        }


def _component(spec: Counting, name: str, model: nn.Module) -> dict[str, Any]:
    roles = {"transformer": "denoiser", "vae": "vae", "text_encoder": "text_encoder"}
    entry: dict[str, Any] = {"class": type(model).__name__, "role": roles[name],
                             "params": parameter_count(model)}
    floating = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    if floating:
        entry["float_buffers"] = floating
    if name == "transformer":
        entry["blocks"] = spec.blocks(model)
        entry["lora_targets"] = lora_targets(model, tuple(spec.lora_linear_targets(model)))
        entry["lora_targets"]["modules"] = list(spec.lora_modules)
        entry["largest_layer_params"] = max(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
        entry["quantizable"] = quantizable(model)  # the share model.quantized_base stores in fewer bits
        entry["fsdp"] = fsdp_units(model, DENOISER_UNITS[spec.family])
    if name == "vae":
        entry["encoder_params"] = sum(p.numel() for n, p in model.named_parameters()
                                      if n.startswith(("encoder.", "quant_conv.")))
    return entry


def count_variant(spec: Counting, size: str | None, activations: bool = True) -> dict[str, Any]:
    import diffusers
    import transformers

    data: dict[str, Any] = {
        "family": spec.family, **({"size": size} if size else {}),
        "generated_by": "benchmarks/count_transformer_family.py",
        "library_versions": {"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                             "transformers": transformers.__version__},
        "native_resolution": spec.resolution, "latent_channels": spec.latent_channels,
        "text_tokens": spec.text_tokens,
        "components": {name: _component(spec, name, model) for name, model in spec.components(size).items()},
    }
    if activations:
        mb = 1024 * 1024
        data["activations_mb"] = {
            "resolution": spec.resolution, "batch": 1,
            "note": "bytes saved for backward in one forward pass at batch 1, flash attention",
            **{f"{method}{'_checkpointing' if gc else ''}_{precision}":
               round(activation_bytes(spec, size, method, gc, precision) / mb, 1)
               for method in ("lora", "full") for gc in (False, True) for precision in PRECISIONS},
        }
        data["transients_mb"] = {
            "resolution": spec.resolution, "batch": 1,
            "note": "peak live bytes over the weights, counted on the meta device (benchmarks/meta_memory.py)",
            **{k: round(v / mb, 1) for k, v in transient_bytes(spec, size).items()},
            **{f"lora_step{'_checkpointing' if gc else ''}_mixed": round(training_step_bytes(spec, size, gc) / mb, 1)
               for gc in (False, True)},
        }
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("family", help="a family whose pipeline module declares COUNTING (flux2-klein, ...)")
    parser.add_argument("sizes", nargs="*", help="its sizes (default: every one)")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    try:
        spec = counting_of(args.family)
    except (ImportError, ValueError) as exc:
        parser.error(f"{args.family}: {exc}")
    sizes: list[str | None] = list(args.sizes or spec.sizes) or [None]
    for size in sizes:
        if size is not None and size not in spec.sizes:
            parser.error(f"unknown size {size!r}; choose from {', '.join(spec.sizes) or 'none'}")
        data = count_variant(spec, size)
        path = args.out / f"{spec.file_name(size)}.json"
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        total = sum(c["params"] for c in data["components"].values())
        print(f"{spec.file_name(size)}: {total / 1e6:,.1f} M parameters -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
