"""Count the parameters and activations of the real SD1.5 / SDXL / SD3-medium architectures.

Run: `python benchmarks/count_parameters.py [FAMILY ...]` (writes resources/architectures/<family>.json).
The families are the ones whose pipeline module declares an `ARCHITECTURE`; another family named
here (FLUX.2 [klein], Z-Image: networks built by their own module) is counted by
`count_transformer_family.py`, every size of it, so this is the one command for every family.

The GUI estimates VRAM from these files and never imports torch. Every model is
built from its published config values on the meta device (no weights, no
download, well under a minute). For each denoiser it also records the bytes
autograd saves for backward during one forward pass at the native resolution,
with and without gradient checkpointing, for a LoRA and for a full fine-tune;
attention is counted as a flash/memory-efficient kernel does (q, k, v, output),
which is what PyTorch uses on CUDA and on the CPU.
`tests/train/test_architecture_counts.py` recomputes the counts and compares.
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

from studio.core.config.rules.sharding import DENOISER_UNITS, TEXT_ENCODER_UNITS
from studio.core.families import FAMILY_NAMES
from studio.train.memory.quantized import quantizable
from studio.train.pipelines.arch_configs import (
    LATENT_CHANNELS,
    LORA_TARGETS,
    NATIVE_RESOLUTION,
    SPECS,
    TEXT_DIM,
    TEXT_LORA_TARGETS,
    TEXT_TOKENS,
    UNET_LORA_TARGETS,
    architecture_families,
    build_component,
    denoiser_spec,
)
from studio.train.pipelines.full_size import parameter_count
from studio.train.pipelines.sd3 import LORA_TARGETS as SD3_LORA_TARGETS
from studio.train.pipelines.sd15 import UNET as SD15_UNET

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counting_parts import PRECISIONS, MixedPrecision, SavedBytes, counting, fsdp_units, lora_targets
from meta_memory import flash_attention, live_bytes, peak_bytes

# memory_calibration.py and gpu_memory.py import these names from here.
__all__ = ["LORA_TARGETS", "NATIVE_RESOLUTION", "SD3_LORA_TARGETS", "SD15_UNET", "SPECS", "UNET_LORA_TARGETS", "build"]

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "resources" / "architectures"


def build(class_name: str, config: dict[str, Any]) -> nn.Module:
    """Instantiate one component on the meta device (no memory, no weights)."""
    return build_component(class_name, config, "meta")


def count_component(family: str, name: str) -> dict[str, Any]:
    class_name, config, role = SPECS[family][name]
    model = build(class_name, config)
    entry: dict[str, Any] = {
        "class": class_name,
        "role": role,
        "params": parameter_count(model),
    }
    # Floating buffers live on the GPU with the weights and follow their dtype (SD3's 36,864 x 1,536
    # position-embedding table); integer ones (CLIP's position ids) are negligible.
    floating = sum(b.numel() for b in model.buffers() if b.is_floating_point())
    if floating:
        entry["float_buffers"] = floating
    if role == "denoiser":
        blocks = getattr(model, "transformer_blocks", None)
        if blocks is not None:
            entry["blocks"] = len(blocks)
        entry["lora_targets"] = lora_targets(model, LORA_TARGETS[family])
        # With fp8 base weights each layer is widened to the training precision while it runs.
        entry["largest_layer_params"] = max(m.weight.numel() for m in model.modules()
                                            if isinstance(m, (nn.Linear, nn.Conv2d)))
        entry["quantizable"] = quantizable(model)  # the share model.quantized_base stores in fewer bits
        entry["fsdp"] = fsdp_units(model, DENOISER_UNITS[family])
    elif role.startswith("text_encoder") and class_name.startswith("CLIP"):
        entry["lora_targets"] = lora_targets(model, TEXT_LORA_TARGETS)
        entry["fsdp"] = fsdp_units(model, TEXT_ENCODER_UNITS)
    if class_name == "AutoencoderKL":
        entry["encoder_params"] = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("encoder.", "quant_conv.")))
    return entry


def _inputs(family: str, resolution: int, dtype: torch.dtype) -> tuple[tuple[Any, ...], dict[str, Any]]:
    side = resolution // 8
    meta = {"device": "meta", "dtype": dtype}
    sample = torch.randn(1, LATENT_CHANNELS[family], side, side, **meta)  # type: ignore[arg-type]
    text = torch.randn(1, TEXT_TOKENS[family], TEXT_DIM[family], **meta)  # type: ignore[arg-type]
    t = torch.ones(1, device="meta")
    if family == "sd15":
        return (sample, t, text), {}
    if family == "sdxl":
        added = {"text_embeds": torch.randn(1, 1280, **meta), "time_ids": torch.randn(1, 6, **meta)}  # type: ignore[arg-type]
        return (sample, t, text), {"added_cond_kwargs": added}
    pooled = torch.randn(1, 2048, **meta)  # type: ignore[arg-type]
    return (), {"hidden_states": sample, "encoder_hidden_states": text, "pooled_projections": pooled, "timestep": t}


def activation_bytes(family: str, method: str, checkpointing: bool, precision: str = "mixed",
                     resolution: int | None = None, batch: int = 1) -> int:
    """Bytes held for backward after one forward pass at `batch`.

    With checkpointing it is what survives the forward (the checkpointed blocks'
    inputs and the unchecked layers) plus the largest block recomputed in backward.
    """
    name = next(n for n, spec in SPECS[family].items() if spec[2] == "denoiser")
    class_name, config, _ = SPECS[family][name]
    dtype = torch.float32 if precision == "fp32" else torch.float16
    # Full fine-tunes keep fp32 master weights; LoRA keeps the frozen base in half precision.
    weight_dtype = torch.float32 if precision == "fp32" or (precision == "mixed" and method == "full") else dtype
    model = build(class_name, config).to(weight_dtype)
    model.requires_grad_(method == "full")
    if method == "lora":
        from peft import LoraConfig

        targets = LORA_TARGETS[family]
        model.add_adapter(LoraConfig(r=16, lora_alpha=16, target_modules=list(targets)))  # type: ignore[operator]
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
    args, kwargs = _denoiser_inputs(family, resolution or NATIVE_RESOLUTION[family], batch, dtype)
    mixed = MixedPrecision() if precision == "mixed" else None
    try:
        if mixed:
            mixed.__enter__()
        with flash_attention(), counting(counter):
            model(*args, **kwargs)
    finally:
        if mixed:
            mixed.__exit__()
    extra = sum(t.numel() * t.element_size() for i, t in inputs.items() if i not in counter.seen)
    return counter.total + extra + (max(blocks) if blocks else 0)


def split_activation_bytes(family: str, method: str, checkpointing: bool, precision: str = "mixed") -> tuple[int, int]:
    """(bytes per image, bytes per model) of what autograd holds for backward at the native size.

    Counted at batch 1 and 2: what grows with the batch is per image (activations), the rest is
    held once whatever the batch (the 16-bit copies autocast makes of fp32 weights and autograd
    saves for the backward of each matmul and convolution, and the LoRA's casts). The estimate
    scales only the first by batch and pixels.
    """
    one = activation_bytes(family, method, checkpointing, precision, batch=1)
    two = activation_bytes(family, method, checkpointing, precision, batch=2)
    per_image = two - one
    return per_image, max(0, one - per_image)


# ---------------------------------------------------------------- transient peaks (live bytes)

T5_TOKENS = 256  # the SD3 pipeline's default max_sequence_length for T5


def _denoiser_inputs(family: str, resolution: int, batch: int, dtype: torch.dtype) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args, kwargs = _inputs(family, resolution, dtype)

    def grow(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.expand(batch, *t.shape[1:]).contiguous() if t.dim() else t
        return {k: grow(v) for k, v in t.items()} if isinstance(t, dict) else t

    return tuple(grow(a) for a in args), {k: grow(v) for k, v in kwargs.items()}


def training_step_bytes(family: str, checkpointing: bool, resolution: int | None = None) -> int:
    """Peak live bytes over the weights of one LoRA step (forward, loss, backward) under fp16 autocast.

    The allocator-level peak a GPU would reach with the same ops (before rounding
    and fragmentation); the estimator's activation term is compared with it.
    """
    from peft import LoraConfig

    _, class_name, config = denoiser_spec(family)
    model = build(class_name, config).to(torch.float16).requires_grad_(False)
    targets = LORA_TARGETS[family]
    model.add_adapter(LoraConfig(r=16, lora_alpha=16, target_modules=list(targets)))  # type: ignore[operator]
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()  # cast_training_params: LoRA weights train in fp32
    if checkpointing:
        model.enable_gradient_checkpointing()  # type: ignore[operator]
    model.train()
    args, kwargs = _inputs(family, resolution or NATIVE_RESOLUTION[family], torch.float16)
    mixed = MixedPrecision()
    mixed.__enter__()  # on through backward: checkpointing recomputes under autocast too
    try:
        with flash_attention(), live_bytes() as mode:
            out = model(*args, **kwargs)
            loss = (out.sample if hasattr(out, "sample") else out[0]).float().pow(2).mean()
            del out
            loss.backward()
            del loss
    finally:
        mixed.__exit__()
    return mode.peak


def transient_bytes(family: str) -> dict[str, int]:
    """Peaks of the no-grad passes at the native size, batch 1, as live bytes over the weights.

    VAE in fp32 (scale by 1/2 for a 16-bit VAE); text encoders and the sampling
    forward of the denoiser (batch 2: classifier-free guidance) in fp16.
    """
    side = NATIVE_RESOLUTION[family]
    vae_class, vae_config, _ = SPECS[family]["vae"]
    vae = build(vae_class, vae_config).to(torch.float32)
    pixels = torch.empty(1, 3, side, side, device="meta")
    latents = torch.empty(1, LATENT_CHANNELS[family], side // 8, side // 8, device="meta")
    _, class_name, config = denoiser_spec(family)
    denoiser = build(class_name, config).to(torch.float16)
    args, kwargs = _denoiser_inputs(family, side, 2, torch.float16)
    out: dict[str, int] = {}
    with torch.no_grad(), flash_attention():
        out["vae_encode_fp32"] = peak_bytes(lambda: vae.encode(pixels).latent_dist.mode())  # type: ignore[operator]
        out["vae_decode_fp32"] = peak_bytes(lambda: vae.decode(latents).sample)  # type: ignore[operator]
        out["denoiser_sampling_fp16"] = peak_bytes(lambda: denoiser(*args, **kwargs))
        text = 0
        for class_name, config, role in SPECS[family].values():
            if role.startswith("text_encoder"):
                encoder = build(class_name, config).to(torch.float16)
                tokens = T5_TOKENS if role == "text_encoder_t5" else 77
                ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
                text = max(text, peak_bytes(lambda: encoder(ids, output_hidden_states=True)))  # noqa: B023
        out["text_encoder_fp16"] = text
    return out


def count_family(family: str, activations: bool = True) -> dict[str, Any]:
    import diffusers
    import transformers

    data: dict[str, Any] = {
        "family": family,
        "generated_by": "benchmarks/count_parameters.py",
        "library_versions": {"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                             "transformers": transformers.__version__},
        "native_resolution": NATIVE_RESOLUTION[family],
        "latent_channels": LATENT_CHANNELS[family],
        "text_tokens": TEXT_TOKENS[family],
        "components": {name: count_component(family, name) for name in SPECS[family]},
    }
    if activations:
        mb = 1024 * 1024
        split = {f"{method}{'_checkpointing' if gc else ''}_{precision}":
                 split_activation_bytes(family, method, gc, precision)
                 for method in ("lora", "full") for gc in (False, True) for precision in PRECISIONS}
        data["activations_mb"] = {
            "resolution": NATIVE_RESOLUTION[family],
            "batch": 1,
            "note": "bytes saved for backward per image in one forward pass (batch 2 minus batch 1), flash attention",
            **{key: round(per_image / mb, 1) for key, (per_image, _) in split.items()},
        }
        data["model_copies_mb"] = {
            "note": "bytes saved for backward once per model whatever the batch (batch 1 minus the per-image "
                    "bytes): autocast's 16-bit copies of fp32 weights, the LoRA's casts",
            **{key: round(per_model / mb, 1) for key, (_, per_model) in split.items()},
        }
        data["transients_mb"] = {
            "resolution": NATIVE_RESOLUTION[family],
            "batch": 1,
            "note": "peak live bytes over the weights, counted on the meta device (benchmarks/meta_memory.py)",
            **{k: round(v / mb, 1) for k, v in transient_bytes(family).items()},
            **{f"lora_step{'_checkpointing' if gc else ''}_mixed": round(training_step_bytes(family, gc) / mb, 1)
               for gc in (False, True)},
        }
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help=f"{', '.join(FAMILY_NAMES)} (default: "
                        f"{', '.join(architecture_families())}); a family that builds its own networks is "
                        "counted by count_transformer_family.py, every size of it")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    families = architecture_families()
    for family in args.families or families:
        if family not in FAMILY_NAMES:
            parser.error(f"unknown family {family!r}; choose from {', '.join(FAMILY_NAMES)}")
        if family not in families:  # one counter for every family: the transformer families' own recipe
            from count_transformer_family import main as count_transformer_family

            count_transformer_family([family, "--out", str(args.out)])
            continue
        data = count_family(family)
        path = args.out / f"{family}.json"
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        total = sum(c["params"] for c in data["components"].values())
        print(f"{family}: {total / 1e6:,.1f} M parameters -> {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
