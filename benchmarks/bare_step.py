"""The bare denoiser training step that the GPU speed benchmark holds the studio's trainer against.

The denoiser alone (frozen bf16 weights, LoRA rank 16 on the family's default targets, AdamW,
bf16 autocast) on random latents and text conditioning of the real shapes: what any trainer
must at least spend per step. Families of published component configs (SD1.5, SDXL, SD3) are
built from their `ARCHITECTURE`; the transformer families (FLUX.2 [klein], Z-Image, Qwen-Image)
from the `COUNTING` of their pipeline module, whose forward inputs the FLOP counter uses too.
In a dry run the denoiser is the tiny pipeline's, at 64 px, with a short caption.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from studio.train.pipelines.arch_configs import (
    LATENT_CHANNELS,
    LORA_TARGETS,
    architecture_families,
    build_component,
    denoiser_spec,
)

SD3_TEXT_TOKENS = 77 + 256  # CLIP tokens, then T5 tokens (zeros when T5 is dropped), as the pipeline does
DRY_RUN_TEXT_TOKENS = 16


@dataclass
class BareStep:
    """A denoiser, its optimizer and one training step on fixed inputs."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    run: Callable[[], torch.Tensor]  # one step; its loss, left on the device


def _from_counting(family: str) -> Any:
    if family in architecture_families():
        return None
    from studio.train.pipelines.counting import counting_of

    return counting_of(family)


def _tiny_denoiser(family: str, tiny: Path) -> Any:
    """The tiny pipeline's denoiser, by the class its model_index.json names."""
    import diffusers

    from studio.core.families import family as declared

    name = declared(family).denoiser
    _library, class_name = json.loads((tiny / "model_index.json").read_text())[name]
    return getattr(diffusers, class_name).from_pretrained(tiny / name)


def _full_size_denoiser(family: str, device: str) -> Any:
    """The full-size denoiser with random weights, drawn on the device (seconds, not minutes)."""
    spec = _from_counting(family)
    if spec is None:
        _name, class_name, config = denoiser_spec(family)
        return build_component(class_name, config, device)
    from studio.core.families import family as declared
    from studio.train.pipelines import family_module
    from studio.train.pipelines.full_size import components

    alone = getattr(family_module(family), "full_size_transformer", None)
    if alone is not None:  # the transformer alone: Qwen-Image's 7B text encoder would take 33 GB more
        return alone(device)
    parts = components(family, device, size=spec.sizes[0] if spec.sizes else None)
    model = parts.pop(declared(family).denoiser)
    parts.clear()
    return model


def _lora_targets(family: str, model: Any) -> list[str]:
    spec = _from_counting(family)
    return list(LORA_TARGETS[family]) if spec is None else spec.lora_linear_targets(model)


def _materialised(value: Any, device: str) -> Any:
    """Meta tensors (of the counter's inputs) made real: random floats, zero positions and ids."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return torch.rand(value.shape, dtype=value.dtype, device=device)
        return torch.zeros(value.shape, dtype=value.dtype, device=device)
    if isinstance(value, dict):
        return {k: _materialised(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [_materialised(v, device) for v in value]
    return value


def _component_inputs(model: Any, family: str, batch: int, side: int, device: str) -> dict[str, Any]:
    """The denoiser's keyword arguments for a UNet or SD3's MMDiT, of the real shapes."""
    b, latent = batch, side // 8
    cfg = model.config
    on = {"device": device}
    latents = torch.randn(b, LATENT_CHANNELS[family], latent, latent, **on)
    if "pooled_projection_dim" in cfg:
        return {"hidden_states": latents,
                "encoder_hidden_states": torch.randn(b, SD3_TEXT_TOKENS, cfg.joint_attention_dim, **on),
                "pooled_projections": torch.randn(b, cfg.pooled_projection_dim, **on),
                "timestep": torch.rand(b, **on) * 1000, "return_dict": False}
    kwargs: dict[str, Any] = {"sample": latents, "timestep": torch.randint(0, 1000, (b,), **on),
                              "encoder_hidden_states": torch.randn(b, 77, cfg.cross_attention_dim, **on),
                              "return_dict": False}
    if cfg.get("addition_embed_type") == "text_time":
        pooled = cfg.projection_class_embeddings_input_dim - 6 * cfg.addition_time_embed_dim
        time_ids = torch.tensor([[side, side, 0, 0, side, side]] * b, dtype=torch.float32, **on)
        kwargs["added_cond_kwargs"] = {"text_embeds": torch.randn(b, pooled, **on), "time_ids": time_ids}
    return kwargs


def bare_step(family: str, batch: int, side: int, device: str, dry_run: bool, tiny: Callable[[str], Path]) -> BareStep:
    """The bare training step of `family` at `side` px and `batch` images."""
    from peft import LoraConfig

    torch.manual_seed(0)
    model: Any = _tiny_denoiser(family, tiny(family)) if dry_run else _full_size_denoiser(family, device)
    dtype = torch.float32 if dry_run else torch.bfloat16
    model.requires_grad_(False)
    model.to(device=device, dtype=dtype)
    model.add_adapter(LoraConfig(r=16, lora_alpha=16, init_lora_weights="gaussian",
                                 target_modules=_lora_targets(family, model)))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    model.train()
    # Fused, as the studio's optimizer is on every device (the CPU's multi-tensor AdamW reads each step count back).
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, fused=True)
    spec = _from_counting(family)
    if spec is None:
        kwargs = _component_inputs(model, family, batch, side, device)
        output: Callable[[Any], torch.Tensor] = lambda out: out[0]  # noqa: E731
    else:
        tokens = DRY_RUN_TEXT_TOKENS if dry_run else spec.text_tokens
        kwargs = _materialised(spec.inputs(model, batch, dtype, resolution=side, text_tokens=tokens), device)
        output = spec.output
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()
    target: list[torch.Tensor] = []

    def run() -> torch.Tensor:
        with autocast:
            out = output(model(**kwargs)).float()
        if not target:
            target.append(torch.randn_like(out))
        loss = torch.nn.functional.mse_loss(out, target[0])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return BareStep(model, optimizer, run)
