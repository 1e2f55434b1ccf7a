"""SDXL pipelines built offline: the published SDXL base architecture (full size, meta device) and the tiny one.

The full-size configuration is stabilityai/stable-diffusion-xl-base-1.0's: a 2.6 B UNet with
text_time conditioning reading CLIP-L and OpenCLIP-bigG side by side (2,048 wide), the 4-channel VAE
scaled by 0.13025, the Euler sampler it ships with. The tiny pipeline is the same structure in miniature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from studio.train.pipelines.arch_configs import CLIP_BIGG, CLIP_L, UNET_LORA_TARGETS, VAE_4CH, Architecture
from studio.train.pipelines.sd15 import SCHEDULE
from studio.train.pipelines.tiny_tokenizer import EOS

UNET: dict[str, Any] = {
    "sample_size": 128, "in_channels": 4, "out_channels": 4, "layers_per_block": 2,
    "block_out_channels": [320, 640, 1280], "cross_attention_dim": 2048, "attention_head_dim": [5, 10, 20],
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "transformer_layers_per_block": [1, 2, 10], "use_linear_projection": True,
    "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2816, "norm_num_groups": 32,
}

ARCHITECTURE = Architecture(
    components={
        "unet": ("UNet2DConditionModel", UNET, "denoiser"),
        # The SDXL VAE's latents are scaled by 0.13025, not SD1.5's 0.18215.
        "vae": ("AutoencoderKL", {**VAE_4CH, "sample_size": 1024, "scaling_factor": 0.13025}, "vae"),
        "text_encoder": ("CLIPTextModel", CLIP_L, "text_encoder"),
        "text_encoder_2": ("CLIPTextModelWithProjection", CLIP_BIGG, "text_encoder"),
    },
    latent_channels=4, text_tokens=77, text_dim=2048, lora_targets=UNET_LORA_TARGETS,
    sampler=("EulerDiscreteScheduler", {
        **SCHEDULE, "timestep_spacing": "leading", "interpolation_type": "linear", "use_karras_sigmas": False,
        "prediction_type": "epsilon",
    }),
    # The OpenCLIP-bigG tokenizer pads with "!".
    tokenizers={"tokenizer": EOS, "tokenizer_2": "!"},
    index_extras={"force_zeros_for_empty_prompt": True},
)


def full_size_parts(tokenizer: Any, folder: Path, t5: bool) -> dict[str, Any]:
    """What the full-size pipeline takes besides its networks: both tokenizers, the published sampler."""
    import diffusers

    return {"tokenizer": tokenizer, "tokenizer_2": tokenizer, "add_watermarker": False,
            "scheduler": diffusers.EulerDiscreteScheduler(timestep_spacing="leading", **SCHEDULE)}


def encoders_to_original(encoders: list[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """Both encoders under the original single-file names (`conditioner.embedders.0/1.*`), bigG in OpenCLIP's."""
    from studio.train.pipelines.single_file import clip_keys, open_clip_to_original

    state = {f"conditioner.embedders.0.transformer.{k}": v for k, v in clip_keys(encoders[0]).items()}
    state.update(open_clip_to_original(encoders[1], "conditioner.embedders.1.model."))
    return state


def build_tiny(folder: Path, seed: int) -> Path:
    """SDXL's structure in miniature: CLIP-L-like and bigG-like encoders, text_time conditioning."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTokenizer

    from studio.train.pipelines.hub_layout import write_hub_layout
    from studio.train.pipelines.tiny import tiny_clip, tiny_vae, tokenizer_folder

    tokenizer = CLIPTokenizer.from_pretrained(tokenizer_folder(folder))
    torch.manual_seed(seed)
    first, second = tiny_clip(tokenizer, 32, projection=False), tiny_clip(tokenizer, 32, projection=True)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4), use_linear_projection=True, transformer_layers_per_block=(1, 2),
        addition_embed_type="text_time", addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=6 * 8 + 32,  # six time ids, then the pooled embedding
        cross_attention_dim=64, norm_num_groups=8,
    )
    scheduler = EulerDiscreteScheduler(**SCHEDULE, timestep_spacing="leading", prediction_type="epsilon")
    pipeline = StableDiffusionXLPipeline(
        vae=tiny_vae(4, scaling_factor=0.13025), text_encoder=first, text_encoder_2=second, tokenizer=tokenizer,
        tokenizer_2=tokenizer, unet=unet, scheduler=scheduler, add_watermarker=False,
    )
    pipeline.save_pretrained(folder, safe_serialization=True)  # type: ignore[attr-defined]
    write_hub_layout(folder)
    return folder
