"""SD3 pipelines built offline: the published SD3-medium architecture (full size, meta device) and the tiny one.

The full-size configuration is stabilityai/stable-diffusion-3-medium-diffusers': a 2 B MMDiT over
a 16-channel VAE, two CLIP encoders with projections and T5-XXL (which the hub alone provides: the
studio's offline single-file configs leave it out), flow-matching Euler with a shift of 3. The tiny
pipeline is the same structure in miniature, with a tiny T5 when asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from studio.train.pipelines.arch_configs import (
    CLIP_BIGG,
    CLIP_L,
    T5_XXL,
    UNET_LORA_TARGETS,
    VAE_4CH,
    Architecture,
)
from studio.train.pipelines.tiny_tokenizer import EOS

TRANSFORMER: dict[str, Any] = {
    "sample_size": 128, "patch_size": 2, "in_channels": 16, "out_channels": 16, "num_layers": 24,
    "attention_head_dim": 64, "num_attention_heads": 24, "joint_attention_dim": 4096,
    "caption_projection_dim": 1536, "pooled_projection_dim": 2048, "pos_embed_max_size": 192,
}
VAE: dict[str, Any] = {**VAE_4CH, "latent_channels": 16, "use_quant_conv": False, "use_post_quant_conv": False}
# The joint attention's text projections too, as diffusers' SD3 LoRA script wraps them.
LORA_TARGETS = (*UNET_LORA_TARGETS, "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
SCHEDULER: dict[str, Any] = {"num_train_timesteps": 1000, "shift": 3.0}

ARCHITECTURE = Architecture(
    components={
        "transformer": ("SD3Transformer2DModel", TRANSFORMER, "denoiser"),
        "vae": ("AutoencoderKL", {**VAE, "sample_size": 1024, "scaling_factor": 1.5305,
                                  "shift_factor": 0.0609}, "vae"),
        "text_encoder": ("CLIPTextModelWithProjection", CLIP_L, "text_encoder"),
        "text_encoder_2": ("CLIPTextModelWithProjection", CLIP_BIGG, "text_encoder"),
        "text_encoder_3": ("T5EncoderModel", T5_XXL, "text_encoder_t5"),
    },
    latent_channels=16, text_tokens=154, text_dim=4096, lora_targets=LORA_TARGETS,
    sampler=("FlowMatchEulerDiscreteScheduler", SCHEDULER),
    tokenizers={"tokenizer": EOS, "tokenizer_2": "!"},
    hub_components=("text_encoder_3", "tokenizer_3"),
)


def full_size_parts(tokenizer: Any, folder: Path, t5: bool) -> dict[str, Any]:
    """What the full-size pipeline takes besides its networks: the tokenizers (a tiny T5 one with `t5`)."""
    import diffusers

    from studio.core.dataset.demo_shapes import CAPTION_WORDS
    from studio.train.pipelines.tiny import t5_tokenizer
    from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS

    return {"tokenizer": tokenizer, "tokenizer_2": tokenizer,
            "scheduler": diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0),
            "tokenizer_3": t5_tokenizer(folder, [*CAPTION_WORDS, *EXTRA_WORDS]) if t5 else None}


def build_tiny(folder: Path, seed: int, t5: bool = False) -> Path:
    """SD3's structure in miniature: two CLIP encoders with projections, an MMDiT, a 16-channel VAE."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTokenizer

    from studio.core.dataset.demo_shapes import CAPTION_WORDS
    from studio.train.pipelines.hub_layout import write_hub_layout
    from studio.train.pipelines.tiny import tiny_clip, tiny_t5, tiny_vae, tokenizer_folder
    from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS

    words = [*CAPTION_WORDS, *EXTRA_WORDS]
    tokenizer = CLIPTokenizer.from_pretrained(tokenizer_folder(folder))
    torch.manual_seed(seed)
    first, second = tiny_clip(tokenizer, 32, projection=True), tiny_clip(tokenizer, 48, projection=True)
    transformer = SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=96, caption_projection_dim=32,
        pooled_projection_dim=32 + 48, pos_embed_max_size=32,
    )
    t5_encoder, t5_tokens = tiny_t5(folder, words) if t5 else (None, None)
    pipeline = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
        vae=tiny_vae(16, scaling_factor=1.5305, shift_factor=0.0609, use_quant_conv=False,
                     use_post_quant_conv=False),
        text_encoder=first, tokenizer=tokenizer, text_encoder_2=second, tokenizer_2=tokenizer,
        text_encoder_3=t5_encoder, tokenizer_3=t5_tokens,
    )
    pipeline.save_pretrained(folder, safe_serialization=True)  # type: ignore[attr-defined]
    write_hub_layout(folder)
    return folder
