"""SD 1.x pipelines built offline: the published SD1.5 architecture (full size, meta device) and the tiny one.

The full-size configuration is runwayml/stable-diffusion-v1-5's: an 860 M UNet reading CLIP-L's
768-wide tokens, the 4-channel VAE, the PNDM sampler it ships with. The tiny pipeline is the same
structure in miniature (seeded random weights, a tokenizer written locally).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from studio.train.pipelines.arch_configs import CLIP_L, UNET_LORA_TARGETS, VAE_4CH, Architecture
from studio.train.pipelines.tiny_tokenizer import EOS

UNET: dict[str, Any] = {
    "sample_size": 64, "in_channels": 4, "out_channels": 4, "layers_per_block": 2,
    "block_out_channels": [320, 640, 1280, 1280], "cross_attention_dim": 768, "attention_head_dim": 8,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "norm_num_groups": 32, "act_fn": "silu", "flip_sin_to_cos": True, "freq_shift": 0,
}
# The DDPM schedule SD1.5 was trained on.
SCHEDULE: dict[str, Any] = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
                            "num_train_timesteps": 1000, "steps_offset": 1}

ARCHITECTURE = Architecture(
    components={
        "unet": ("UNet2DConditionModel", UNET, "denoiser"),
        "vae": ("AutoencoderKL", {**VAE_4CH, "sample_size": 512}, "vae"),
        "text_encoder": ("CLIPTextModel", CLIP_L, "text_encoder"),
    },
    latent_channels=4, text_tokens=77, text_dim=768, lora_targets=UNET_LORA_TARGETS,
    sampler=("PNDMScheduler", {**SCHEDULE, "set_alpha_to_one": False, "skip_prk_steps": True,
                               "prediction_type": "epsilon"}),
    tokenizers={"tokenizer": EOS},
    index_extras={"safety_checker": [None, None], "feature_extractor": [None, None],
                  "image_encoder": [None, None], "requires_safety_checker": False},
)


def full_size_parts(tokenizer: Any, folder: Path, t5: bool) -> dict[str, Any]:
    """What the full-size pipeline takes besides its networks: the published sampler, no safety checker."""
    import diffusers

    return {"tokenizer": tokenizer, "scheduler": diffusers.PNDMScheduler(skip_prk_steps=True, **SCHEDULE),
            "safety_checker": None, "feature_extractor": None, "requires_safety_checker": False}


def encoders_to_original(encoders: list[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """The text encoder's weights under the original single-file names: SD 1.x's CLIP-L as
    `cond_stage_model.transformer.*`, SD 2.x's OpenCLIP ViT-H in OpenCLIP's layout as `cond_stage_model.model.*`.
    A1111/Forge tell an SD 2.x checkpoint by that layout's first fused q/k/v, and ComfyUI reads the 2.x text
    encoder from there only: under the 1.x names the checkpoint failed to load in the one and had an untrained
    text encoder in the other."""
    from studio.train.pipelines.single_file import clip_keys, is_open_clip, open_clip_to_original

    if is_open_clip(encoders[0]):
        return open_clip_to_original(encoders[0], "cond_stage_model.model.")
    return {f"cond_stage_model.transformer.{k}": v for k, v in clip_keys(encoders[0]).items()}


def build_tiny(folder: Path, seed: int, prediction_type: str = "epsilon") -> Path:
    from diffusers import DDPMScheduler, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTokenizer

    from studio.train.pipelines.hub_layout import write_hub_layout
    from studio.train.pipelines.tiny import tiny_clip, tiny_vae, tokenizer_folder

    tokenizer = CLIPTokenizer.from_pretrained(tokenizer_folder(folder))
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8,
    )
    vae = tiny_vae(4)
    text_encoder = tiny_clip(tokenizer, 32, projection=False)
    schedule: dict[str, Any] = {**SCHEDULE, "prediction_type": prediction_type}
    # The sampler SD1.5 ships with; training reads the same config as a DDPM scheduler.
    scheduler = PNDMScheduler(skip_prk_steps=True, set_alpha_to_one=False, **schedule)
    assert DDPMScheduler.from_config(scheduler.config).config.prediction_type == prediction_type  # type: ignore[attr-defined]
    pipeline = StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    pipeline.save_pretrained(folder, safe_serialization=True)  # type: ignore[attr-defined]
    write_hub_layout(folder)
    return folder
