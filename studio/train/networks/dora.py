"""DoRA in the kohya-format file: the `dora_scale` ComfyUI applies, computed from peft's magnitudes.

peft's DoRA layer computes W' = m / ||W + dW|| * (W + dW), the norm taken over each output row of the
merged weight (peft/tuners/lora/dora.py, `get_weight_norm`); `m` (`lora_magnitude_vector`) holds one
value per output feature. ComfyUI reads `<module>.dora_scale` (comfy/lora.py) and applies it in
`weight_decompose` (comfy/weight_adapter/base.py): a scale with as many rows as the weight has outputs
is applied as (W + dW) * dora_scale / ||W||, the norm over each output row of the *base* weight W, not
the merged one. So the file holds dora_scale = m * ||W|| / ||W + dW||, shaped (out, 1, ...) like
ComfyUI's norm, and ComfyUI then merges exactly what peft trained. The base weight enters the value:
the file is for the base model it was trained on, as every LoRA is.
"""

from __future__ import annotations

from typing import Any

import torch

MAGNITUDE = "lora_magnitude_vector"  # peft's state-dict name of a DoRA layer's magnitudes
DORA_SCALE = "dora_scale"  # ComfyUI's (and LyCORIS') name of the same layer's scale
ADAPTER = "default"


def _row_norms(weight: torch.Tensor) -> torch.Tensor:
    return weight.reshape(weight.shape[0], -1).norm(dim=1)


def comfy_dora_scales(module: torch.nn.Module, magnitude_keys: list[str]) -> dict[str, torch.Tensor]:
    """ComfyUI's dora_scale of every DoRA layer of a peft-wrapped `module`, keyed by the layer's name as
    `magnitude_keys` (the state dict's `<layer>.lora_magnitude_vector` keys) name it; fp32 on the CPU."""
    from peft.tuners.lora import LoraLayer

    layers: dict[str, Any] = {name: layer for name, layer in module.named_modules()
                             if isinstance(layer, LoraLayer) and layer.use_dora.get(ADAPTER)}
    from studio.train.memory.block_swap import weights_on_host

    out: dict[str, torch.Tensor] = {}
    with weights_on_host(module):  # model.blocks_to_swap: the swapped blocks' base weights, read where they wait
        for key in magnitude_keys:
            name = key.removesuffix(f".{MAGNITUDE}")
            # A text model may name its layers one level deeper (text_model.encoder...) than its state dict does.
            layer = layers.get(name) or next((v for k, v in layers.items() if k.endswith(f".{name}")), None)
            if layer is None:
                raise KeyError(f"no DoRA layer {name} in {type(module).__name__}")
            out[name] = _comfy_scale(layer)
    return out


@torch.no_grad()
def _comfy_scale(layer: Any) -> torch.Tensor:  # a peft LoraLayer with DoRA
    base = layer.get_base_layer().weight.detach().float()
    # Computed where the base weight is (system memory, for a swapped block).
    merged = base + layer.get_delta_weight(ADAPTER).detach().float().to(base.device)
    magnitude = layer.lora_magnitude_vector[ADAPTER].weight.detach().float().reshape(-1).to(base.device)
    scale = magnitude * _row_norms(base) / _row_norms(merged)
    return scale.reshape(base.shape[0], *[1] * (base.dim() - 1)).cpu()
