"""The published configurations of the real SD1.5, SDXL and SD3-medium components.

One source for the parameter counter (benchmarks/count_parameters.py), the full-size
random-weight pipelines (`studio-train tiny --full-size`) and the GPU benchmarks:
memory and speed depend on these shapes, not on the weights' values.
"""

from __future__ import annotations

from typing import Any

import torch

from studio.core.families import family

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
        # The SDXL VAE's latents are scaled by 0.13025, not SD1.5's 0.18215.
        "vae": ("AutoencoderKL", {**VAE_4CH, "sample_size": 1024, "scaling_factor": 0.13025}, "vae"),
        "text_encoder": ("CLIPTextModel", CLIP_L, "text_encoder"),
        "text_encoder_2": ("CLIPTextModelWithProjection", CLIP_BIGG, "text_encoder"),
    },
    "sd3": {
        "transformer": ("SD3Transformer2DModel", SD3_TRANSFORMER, "denoiser"),
        "vae": ("AutoencoderKL", {**VAE_SD3, "sample_size": 1024, "scaling_factor": 1.5305,
                                  "shift_factor": 0.0609}, "vae"),
        "text_encoder": ("CLIPTextModelWithProjection", CLIP_L, "text_encoder"),
        "text_encoder_2": ("CLIPTextModelWithProjection", CLIP_BIGG, "text_encoder"),
        "text_encoder_3": ("T5EncoderModel", T5_XXL, "text_encoder_t5"),
    },
}
FAMILIES = tuple(SPECS)
# The diffusers pipeline class of each family.
PIPELINES = {name: family(name).pipeline_class for name in FAMILIES}
NATIVE_RESOLUTION = {name: family(name).native_resolution for name in FAMILIES}
LATENT_CHANNELS = {"sd15": 4, "sdxl": 4, "sd3": 16}
TEXT_TOKENS = {"sd15": 77, "sdxl": 77, "sd3": 154}
TEXT_DIM = {"sd15": 768, "sdxl": 2048, "sd3": 4096}

# Modules the LoRA wraps, as the diffusers training scripts choose them.
UNET_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")
SD3_LORA_TARGETS = (*UNET_LORA_TARGETS, "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
TEXT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj")


def build_component(class_name: str, config: dict[str, Any], device: str | torch.device = "meta") -> torch.nn.Module:
    """One component from its config; on the meta device it costs no memory and no time."""
    import diffusers
    import transformers

    with torch.device(device):
        if hasattr(diffusers, class_name) and class_name != "CLIPTextModel":
            return getattr(diffusers, class_name)(**config)
        cls = getattr(transformers, class_name)
        conf_cls = transformers.T5Config if class_name.startswith("T5") else transformers.CLIPTextConfig
        return cls(conf_cls(**config))


def denoiser_spec(family: str) -> tuple[str, str, dict[str, Any]]:
    """(component name, class name, config) of the family's denoiser."""
    name = next(n for n, spec in SPECS[family].items() if spec[2] == "denoiser")
    class_name, config, _ = SPECS[family][name]
    return name, class_name, config
