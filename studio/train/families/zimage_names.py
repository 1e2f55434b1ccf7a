"""Z-Image LoRA files that ComfyUI reads: `diffusion_model.<diffusers module>` with lora_down / lora_up / alpha.

ComfyUI runs Z-Image as its Lumina2 model type (`comfy.model_base.Lumina2`, the NextDiT network) under
the original names (fused `attention.qkv`, `attention.out`, `feed_forward.w1/w2/w3`...). Its LoRA
loader maps the diffusers module names of `ZImageTransformer2DModel` onto them (`z_image_to_diffusers`
in comfy/utils.py: `to_q`/`to_k`/`to_v` each onto a third of `qkv`, `to_out.0` onto `out`), under the
prefixes `diffusion_model.`, `transformer.` and none, for the `.weight` modules of the main and the two
refiner stacks and a few global layers. The file here uses `diffusion_model.`, which diffusers'
Z-Image loader reads too (`_convert_non_diffusers_z_image_lora_to_diffusers`), so no fusing is needed.
"""

from __future__ import annotations

import re

import torch

from studio.train.errors import TrainError

# The modules of one block ComfyUI maps (adaLN only in the blocks that have a modulation).
BLOCK_MODULES = ("attention.to_q", "attention.to_k", "attention.to_v", "attention.to_out.0",
                 "feed_forward.w1", "feed_forward.w2", "feed_forward.w3", "adaLN_modulation.0")
GLOBAL_MODULES = ("all_final_layer.2-1.linear", "all_final_layer.2-1.adaLN_modulation.1", "all_x_embedder.2-1",
                  "cap_embedder.1", "t_embedder.mlp.0", "t_embedder.mlp.2")
_BLOCK = re.compile(r"^(layers|noise_refiner|context_refiner)\.(\d+)\.(.+)$")
PREFIX = "diffusion_model."


def comfy_knows(module: str) -> bool:
    """Whether ComfyUI's Z-Image key map has a place for a LoRA of this diffusers module."""
    match = _BLOCK.match(module)
    if match:
        kind, _index, rest = match.groups()
        return rest in BLOCK_MODULES and not (kind == "context_refiner" and rest.startswith("adaLN"))
    return module in GLOBAL_MODULES


def comfy_name(module: str) -> str:
    """`diffusion_model.<module>`, which ComfyUI's Z-Image key map places; TrainError for a module it has no place for."""
    if not comfy_knows(module):
        raise TrainError(
            "config", f"the LoRA layer {module} has no place in ComfyUI's Z-Image key map",
            "leave method.target_modules empty (the Z-Image defaults), or remove \"kohya\" from output.formats",
        )
    return PREFIX + module


def comfy_state_dict(peft_layers: dict[str, torch.Tensor], alpha: float,
                     dora_scales: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """peft-format transformer LoRA layers -> `diffusion_model.<module>.lora_down/lora_up.weight` and `.alpha`;
    a DoRA layer's magnitudes -> `.dora_scale` (kohya.renamed_state_dict)."""
    from studio.train.families.kohya import renamed_state_dict

    return renamed_state_dict(peft_layers, alpha, comfy_name, dora_scales)
