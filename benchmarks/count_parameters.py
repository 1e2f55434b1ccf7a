"""Count the parameters and activations of the real SD1.5 / SDXL / SD3-medium architectures.

Run: `python benchmarks/count_parameters.py` (writes resources/architectures/<family>.json).

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "resources" / "architectures"
FAMILIES = ("sd15", "sdxl", "sd3")

# Modules the LoRA wraps, as the diffusers training scripts choose them.
UNET_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")
SD3_LORA_TARGETS = (*UNET_LORA_TARGETS, "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
TEXT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj")

# ---------------------------------------------------------------- published configs

SD15_UNET: dict[str, Any] = {
    "sample_size": 64, "in_channels": 4, "out_channels": 4, "layers_per_block": 2,
    "block_out_channels": [320, 640, 1280, 1280], "cross_attention_dim": 768, "attention_head_dim": 8,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "norm_num_groups": 32, "act_fn": "silu", "flip_sin_to_cos": True, "freq_shift": 0,
}
SDXL_UNET: dict[str, Any] = {
    "sample_size": 128, "in_channels": 4, "out_channels": 4, "layers_per_block": 2,
    "block_out_channels": [320, 640, 1280], "cross_attention_dim": 2048, "attention_head_dim": [5, 10, 20],
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "transformer_layers_per_block": [1, 2, 10], "use_linear_projection": True,
    "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2816, "norm_num_groups": 32,
}
SD3_TRANSFORMER: dict[str, Any] = {
    "sample_size": 128, "patch_size": 2, "in_channels": 16, "out_channels": 16, "num_layers": 24,
    "attention_head_dim": 64, "num_attention_heads": 24, "joint_attention_dim": 4096,
    "caption_projection_dim": 1536, "pooled_projection_dim": 2048, "pos_embed_max_size": 192,
}
VAE_4CH: dict[str, Any] = {
    "in_channels": 3, "out_channels": 3, "latent_channels": 4, "layers_per_block": 2,
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
}
VAE_SD3: dict[str, Any] = {**VAE_4CH, "latent_channels": 16, "use_quant_conv": False, "use_post_quant_conv": False}
CLIP_L: dict[str, Any] = {
    "vocab_size": 49408, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "max_position_embeddings": 77, "hidden_act": "quick_gelu", "projection_dim": 768,
}
CLIP_BIGG: dict[str, Any] = {
    "vocab_size": 49408, "hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32,
    "num_attention_heads": 20, "max_position_embeddings": 77, "hidden_act": "gelu", "projection_dim": 1280,
}
T5_XXL: dict[str, Any] = {
    "vocab_size": 32128, "d_model": 4096, "d_kv": 64, "d_ff": 10240, "num_layers": 24, "num_heads": 64,
    "relative_attention_num_buckets": 32, "feed_forward_proj": "gated-gelu",
}

# family -> component -> (class name, config, role)
SPECS: dict[str, dict[str, tuple[str, dict[str, Any], str]]] = {
    "sd15": {
        "unet": ("UNet2DConditionModel", SD15_UNET, "denoiser"),
        "vae": ("AutoencoderKL", {**VAE_4CH, "sample_size": 512}, "vae"),
        "text_encoder": ("CLIPTextModel", CLIP_L, "text_encoder"),
    },
    "sdxl": {
        "unet": ("UNet2DConditionModel", SDXL_UNET, "denoiser"),
        "vae": ("AutoencoderKL", {**VAE_4CH, "sample_size": 1024}, "vae"),
        "text_encoder": ("CLIPTextModel", CLIP_L, "text_encoder"),
        "text_encoder_2": ("CLIPTextModelWithProjection", CLIP_BIGG, "text_encoder"),
    },
    "sd3": {
        "transformer": ("SD3Transformer2DModel", SD3_TRANSFORMER, "denoiser"),
        "vae": ("AutoencoderKL", {**VAE_SD3, "sample_size": 1024}, "vae"),
        "text_encoder": ("CLIPTextModelWithProjection", CLIP_L, "text_encoder"),
        "text_encoder_2": ("CLIPTextModelWithProjection", CLIP_BIGG, "text_encoder"),
        "text_encoder_3": ("T5EncoderModel", T5_XXL, "text_encoder_t5"),
    },
}
NATIVE_RESOLUTION = {"sd15": 512, "sdxl": 1024, "sd3": 1024}
LATENT_CHANNELS = {"sd15": 4, "sdxl": 4, "sd3": 16}
TEXT_TOKENS = {"sd15": 77, "sdxl": 77, "sd3": 154}
TEXT_DIM = {"sd15": 768, "sdxl": 2048, "sd3": 4096}


def build(class_name: str, config: dict[str, Any]) -> nn.Module:
    """Instantiate one component on the meta device (no memory, no weights)."""
    import diffusers
    import transformers

    with torch.device("meta"):
        if hasattr(diffusers, class_name) and class_name != "CLIPTextModel":
            return getattr(diffusers, class_name)(**config)  # type: ignore[no-any-return]
        cls = getattr(transformers, class_name)
        conf_cls = transformers.T5Config if class_name.startswith("T5") else transformers.CLIPTextConfig
        return cls(conf_cls(**config))  # type: ignore[no-any-return]


def lora_targets(model: nn.Module, targets: tuple[str, ...]) -> dict[str, Any]:
    """The Linear layers a LoRA wraps, grouped by (in, out) so any rank's size follows."""
    shapes: dict[tuple[int, int], int] = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and any(name == t or name.endswith("." + t) for t in targets):
            key = (module.in_features, module.out_features)
            shapes[key] = shapes.get(key, 0) + 1
    rows = [{"in": i, "out": o, "count": n} for (i, o), n in sorted(shapes.items())]
    return {
        "modules": list(targets),
        "layers": sum(r["count"] for r in rows),
        "in_plus_out": sum((r["in"] + r["out"]) * r["count"] for r in rows),
        "shapes": rows,
    }


def count_component(family: str, name: str) -> dict[str, Any]:
    class_name, config, role = SPECS[family][name]
    model = build(class_name, config)
    entry: dict[str, Any] = {
        "class": class_name,
        "role": role,
        "params": sum(p.numel() for p in model.parameters()),
    }
    if role == "denoiser":
        blocks = getattr(model, "transformer_blocks", None)
        if blocks is not None:
            entry["blocks"] = len(blocks)
        entry["lora_targets"] = lora_targets(model, SD3_LORA_TARGETS if family == "sd3" else UNET_LORA_TARGETS)
    elif role.startswith("text_encoder") and class_name.startswith("CLIP"):
        entry["lora_targets"] = lora_targets(model, TEXT_LORA_TARGETS)
    if class_name == "AutoencoderKL":
        entry["encoder_params"] = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("encoder.", "quant_conv.")))
    return entry


# ---------------------------------------------------------------- activations


class _FlashLikeAttention(torch.autograd.Function):
    """Stands in for SDPA on meta tensors: saves what a flash kernel saves, not the score matrix."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = q.new_empty((*q.shape[:-1], v.shape[-1]))
        lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:  # pragma: no cover - never run
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _flash_like(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return _FlashLikeAttention.apply(q, k, v)  # type: ignore[no-any-return]


class SavedBytes:
    """Counts the distinct tensors autograd keeps for backward (parameters excluded)."""

    def __init__(self, params: set[int]) -> None:
        self.params = params
        self.seen: dict[int, torch.Tensor] = {}

    def _root(self, t: torch.Tensor) -> torch.Tensor:
        while t._base is not None:
            t = t._base
        return t

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        root = self._root(t)
        if id(root) not in self.params and not isinstance(root, nn.Parameter):
            self.seen[id(root)] = root
        return t

    @property
    def total(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.seen.values())


@contextmanager
def _counting(counter: SavedBytes) -> Iterator[None]:
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        yield


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


class _MixedPrecision:
    """Autocast's dtype flow on meta tensors (autocast itself ignores them).

    Matmuls and convolutions compute in fp16 from fp32 or fp16 inputs; group and
    layer norms compute in fp32 and return fp32, so the tensors saved around them
    are as wide as on a GPU under `torch.autocast`.
    """

    def __init__(self) -> None:
        import torch.nn.functional as F

        self.F = F
        self.saved = {n: getattr(F, n) for n in ("linear", "conv2d", "group_norm", "layer_norm")}

    def __enter__(self) -> None:
        F, orig, half = self.F, self.saved, torch.float16

        def cast(t: Any, dtype: torch.dtype) -> Any:
            return t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

        def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
            return orig["linear"](cast(x, half), cast(w, half), cast(b, half))  # type: ignore[no-any-return]

        def conv2d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, *a: Any) -> torch.Tensor:
            return orig["conv2d"](cast(x, half), cast(w, half), cast(b, half), *a)  # type: ignore[no-any-return]

        def group_norm(x: torch.Tensor, groups: int, w: Any = None, b: Any = None, eps: float = 1e-5) -> torch.Tensor:
            f32 = torch.float32
            return orig["group_norm"](cast(x, f32), groups, cast(w, f32), cast(b, f32), eps)  # type: ignore[no-any-return]

        def layer_norm(x: torch.Tensor, shape: Any, w: Any = None, b: Any = None, eps: float = 1e-5) -> torch.Tensor:
            f32 = torch.float32
            return orig["layer_norm"](cast(x, f32), shape, cast(w, f32), cast(b, f32), eps)  # type: ignore[no-any-return]

        F.linear, F.conv2d, F.group_norm, F.layer_norm = linear, conv2d, group_norm, layer_norm  # type: ignore[assignment]

    def __exit__(self, *exc: object) -> None:
        for name, fn in self.saved.items():
            setattr(self.F, name, fn)


# Precision modes: fp32 (no mixed precision, as on a CPU), fp16 (half weights, no autocast),
# mixed (fp32 or fp16 weights under fp16/bf16 autocast, the usual GPU setting).
PRECISIONS = ("fp32", "mixed", "fp16")


def activation_bytes(family: str, method: str, checkpointing: bool, precision: str = "mixed",
                     resolution: int | None = None) -> int:
    """Bytes held for backward after one forward pass at batch 1.

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

        targets = SD3_LORA_TARGETS if family == "sd3" else UNET_LORA_TARGETS
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
        with _counting(inner):
            out = module(*args)
        blocks.append(inner.total)
        return out

    if checkpointing:
        model.enable_gradient_checkpointing(gradient_checkpointing_func=fake_checkpoint)  # type: ignore[operator]
    args, kwargs = _inputs(family, resolution or NATIVE_RESOLUTION[family], dtype)
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = _flash_like  # type: ignore[assignment]
    mixed = _MixedPrecision() if precision == "mixed" else None
    try:
        if mixed:
            mixed.__enter__()
        with _counting(counter):
            model(*args, **kwargs)
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
        if mixed:
            mixed.__exit__()
    extra = sum(t.numel() * t.element_size() for i, t in inputs.items() if i not in counter.seen)
    return counter.total + extra + (max(blocks) if blocks else 0)


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
        data["activations_mb"] = {
            "resolution": NATIVE_RESOLUTION[family],
            "batch": 1,
            "note": "bytes saved for backward in one forward pass at batch 1, flash attention",
            **{
                f"{method}{'_checkpointing' if gc else ''}_{precision}":
                    round(activation_bytes(family, method, gc, precision) / mb, 1)
                for method in ("lora", "full")
                for gc in (False, True)
                for precision in PRECISIONS
            },
        }
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help="sd15, sdxl, sd3 (default: all)")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for family in args.families or FAMILIES:
        if family not in FAMILIES:
            parser.error(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
        data = count_family(family)
        path = args.out / f"{family}.json"
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        total = sum(c["params"] for c in data["components"].values())
        print(f"{family}: {total / 1e6:,.1f} M parameters -> {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
