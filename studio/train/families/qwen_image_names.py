"""Qwen-Image LoRA files that ComfyUI and musubi-tuner read: `lora_unet_<diffusers module, dots as underscores>`
with lora_down / lora_up / alpha.

ComfyUI runs Qwen-Image as its QwenImage model type under diffusers' own module names
(`transformer_blocks.N.attn.to_q`, `img_mlp.net.0.proj`...), and its LoRA key map (comfy/lora.py,
`model_lora_keys_unet`) reads `lora_unet_<name with underscores>` for every model, plus `<name>`,
`transformer.<name>` and `lycoris_<name>` for QwenImage. kohya's musubi-tuner writes and reads the
`lora_unet_` form (networks/lora_qwen_image.py), and diffusers reads it back in `QwenImagePipeline`
(`_convert_non_diffusers_qwen_lora_to_diffusers`), so this one layout serves the three.

The underscores must be turned back into dots by those readers; diffusers does it with a list of names it
keeps whole, so a module it would split wrongly is refused here with what to do instead.
"""

from __future__ import annotations

import re

import torch

from studio.train.errors import TrainError

PREFIX = "lora_unet_"
# The modules of one block whose names survive the round trip through the readers' underscore form.
BLOCK_MODULES = ("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.add_q_proj", "attn.add_k_proj",
                 "attn.add_v_proj", "attn.to_add_out", "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj",
                 "txt_mlp.net.2", "img_mod.1", "txt_mod.1")
GLOBAL_MODULES = ("img_in", "txt_in", "proj_out", "norm_out.linear", "time_text_embed.timestep_embedder.linear_1",
                  "time_text_embed.timestep_embedder.linear_2")
_BLOCK = re.compile(r"^transformer_blocks\.(\d+)\.(.+)$")


def comfy_knows(module: str) -> bool:
    """Whether the readers of the `lora_unet_` layout put a LoRA of this diffusers module back in its place."""
    match = _BLOCK.match(module)
    if match:
        return match.group(2) in BLOCK_MODULES
    return module in GLOBAL_MODULES


def kohya_name(module: str) -> str:
    return PREFIX + module.replace(".", "_")


def comfy_name(module: str) -> str:
    """`lora_unet_<module>`, as ComfyUI, musubi-tuner and diffusers read it back; TrainError for a module they cannot."""
    if not comfy_knows(module):
        raise TrainError(
            "config", f"the LoRA layer {module} has no name ComfyUI, musubi-tuner and diffusers all read back",
            "leave method.target_modules empty (the Qwen-Image defaults), or remove \"kohya\" from output.formats",
        )
    return kohya_name(module)


def comfy_state_dict(peft_layers: dict[str, torch.Tensor], alpha: float,
                     dora_scales: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """peft-format transformer LoRA layers -> `lora_unet_<module>.lora_down/lora_up.weight` and `.alpha`; a DoRA
    layer's magnitudes -> `.dora_scale` (kohya.renamed_state_dict)."""
    from studio.train.families.kohya import renamed_state_dict

    return renamed_state_dict(peft_layers, alpha, comfy_name, dora_scales)
