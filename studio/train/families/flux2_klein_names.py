"""FLUX.2 [klein] LoRA files in the original (BFL) layout that ComfyUI reads: `lora_unet_<module>`.

ComfyUI holds a Flux.2 transformer under its original names (`double_blocks.N.img_attn.qkv`,
`single_blocks.N.linear1`, `img_in`, `final_layer.linear`...) and maps a LoRA key
`lora_unet_<name with dots as underscores>` (lora_down / lora_up / alpha) onto each of them;
diffusers' Flux2 loader reads the same keys (`_convert_kohya_flux2_lora_to_diffusers`).
diffusers splits the fused attention projections into to_q / to_k / to_v: their LoRAs are
joined here into one of the fused layer, the down matrices stacked and the up matrices
placed block-diagonally (rank times the parts, alpha with it, so the scale alpha / rank stays).
"""

from __future__ import annotations

import re

import torch

from studio.train.errors import TrainError
from studio.train.networks.dora import DORA_SCALE, MAGNITUDE

# diffusers module of a double-stream block -> (original module, part of a fused q/k/v or None)
DOUBLE_BLOCK: dict[str, tuple[str, int | None]] = {
    "attn.to_q": ("img_attn.qkv", 0), "attn.to_k": ("img_attn.qkv", 1), "attn.to_v": ("img_attn.qkv", 2),
    "attn.add_q_proj": ("txt_attn.qkv", 0), "attn.add_k_proj": ("txt_attn.qkv", 1),
    "attn.add_v_proj": ("txt_attn.qkv", 2),
    "attn.to_out.0": ("img_attn.proj", None), "attn.to_add_out": ("txt_attn.proj", None),
    "ff.linear_in": ("img_mlp.0", None), "ff.linear_out": ("img_mlp.2", None),
    "ff_context.linear_in": ("txt_mlp.0", None), "ff_context.linear_out": ("txt_mlp.2", None),
}
SINGLE_BLOCK = {"attn.to_qkv_mlp_proj": "linear1", "attn.to_out": "linear2"}
GLOBAL = {
    "x_embedder": "img_in", "context_embedder": "txt_in", "proj_out": "final_layer.linear",
    "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
}
# The shared modulation layers, under their original names (`lin`, where diffusers says `linear`; the weights are the
# same). The LoHa/LoKr file names them so; the kohya LoRA file leaves them out, as diffusers' FLUX.2 reader does.
MODULATION = {
    "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
    "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
    "single_stream_modulation.linear": "single_stream_modulation.lin",
}
_BLOCK = re.compile(r"^(transformer_blocks|single_transformer_blocks)\.(\d+)\.(.+)$")
_PEFT_KEY = re.compile(r"^(.+)\.lora_([AB])(?:\.default)?\.weight$")


def original_module(diffusers_module: str) -> tuple[str, int | None]:
    """The original (ComfyUI) name of a diffusers module of the Flux2 transformer, and its q/k/v part."""
    match = _BLOCK.match(diffusers_module)
    if match:
        kind, index, rest = match.groups()
        if kind == "transformer_blocks" and rest in DOUBLE_BLOCK:
            name, part = DOUBLE_BLOCK[rest]
            return f"double_blocks.{index}.{name}", part
        if kind == "single_transformer_blocks" and rest in SINGLE_BLOCK:
            return f"single_blocks.{index}.{SINGLE_BLOCK[rest]}", None
    elif diffusers_module in GLOBAL:
        return GLOBAL[diffusers_module], None
    raise TrainError(
        "config", f"the LoRA layer {diffusers_module} has no name in ComfyUI's FLUX.2 layout",
        "leave method.target_modules empty (the [klein] defaults), or remove \"kohya\" from output.formats",
    )


def comfy_key(original: str) -> str:
    return "lora_unet_" + original.replace(".", "_")


def lycoris_module(module: str) -> str:
    """A transformer module's name in the LoHa/LoKr file, as ComfyUI maps it onto its FLUX.2 model.

    A module with one original layer gets that layer's name (`lora_unet_single_blocks_0_linear1`),
    which ComfyUI finds for any model by its weight names. A part of a fused q/k/v cannot: a Kronecker
    or Hadamard product of three parts is no product of one layer, so it keeps its diffusers name
    (`lora_transformer_transformer_blocks_0_attn_to_q`), which ComfyUI's Flux key map places at its
    rows of the fused layer. (The Flux map knows only FLUX.1's other diffusers names: FLUX.2's
    `attn.to_qkv_mlp_proj`, `ff.linear_in` or `time_guidance_embed` under diffusers names were dropped.)
    A shared modulation layer gets its original name (`lora_unet_double_stream_modulation_img_lin`): under its
    diffusers name ComfyUI's Flux map had no place for it and the layer was "lora key not loaded". A layer the
    original layout has no name for keeps its diffusers name too (`norm_out.linear`, which the Flux map places).
    """
    if module in MODULATION:
        return comfy_key(MODULATION[module])
    try:
        original, part = original_module(module)
    except TrainError:
        return "lora_transformer_" + module.replace(".", "_")
    return comfy_key(original) if part is None else "lora_transformer_" + module.replace(".", "_")


def comfy_state_dict(peft_layers: dict[str, torch.Tensor], alpha: float,
                     dora_scales: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """peft-format transformer LoRA layers -> `lora_unet_*` keys with lora_down / lora_up / alpha; a DoRA
    layer's magnitudes -> `.dora_scale`, the value ComfyUI applies (`dora_scales`, networks/dora.py)."""
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in peft_layers.items():
        if key.endswith(f".{MAGNITUDE}"):
            module = key.removesuffix(f".{MAGNITUDE}")
            pairs.setdefault(module, {})["scale"] = (dora_scales or {})[module].to(value.dtype)
            continue
        match = _PEFT_KEY.match(key)
        if not match:
            raise TrainError("checkpoint", f"unexpected LoRA tensor {key} (neither lora_A nor lora_B)",
                             "train again from the last checkpoint")
        module, which = match.groups()
        pairs.setdefault(module, {})[which] = value
    fused: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    out: dict[str, torch.Tensor] = {}
    for module, pair in sorted(pairs.items()):
        original, part = original_module(module)
        if part is None:
            out[f"{comfy_key(original)}.lora_down.weight"] = pair["A"].contiguous()
            out[f"{comfy_key(original)}.lora_up.weight"] = pair["B"].contiguous()
            out[f"{comfy_key(original)}.alpha"] = torch.tensor(float(alpha))
            if "scale" in pair:
                out[f"{comfy_key(original)}.{DORA_SCALE}"] = pair["scale"]
        else:
            fused.setdefault(original, {})[part] = pair
    for original, parts in fused.items():
        down, up = _fuse(parts)
        out[f"{comfy_key(original)}.lora_down.weight"] = down
        out[f"{comfy_key(original)}.lora_up.weight"] = up
        # The fused rank is the parts' ranks together: alpha grows with it, so alpha / rank is unchanged.
        out[f"{comfy_key(original)}.alpha"] = torch.tensor(float(alpha) * len(parts))
        if any("scale" in pair for pair in parts.values()):
            out[f"{comfy_key(original)}.{DORA_SCALE}"] = _fused_scale(original, parts)
    return out


def _fused_scale(original: str, parts: dict[int, dict[str, torch.Tensor]]) -> torch.Tensor:
    """The fused layer's dora_scale: each part's rows in q/k/v order (the norms are per output row, so the
    parts' scales are the fused layer's). A part left untrained would need its base rows' norms, which the
    file cannot be given here: DoRA on part of a fused projection is refused."""
    if sorted(parts) != [0, 1, 2]:
        raise TrainError(
            "config", f"DoRA on part of {original} (ComfyUI's fused q/k/v): ComfyUI would rescale the "
            "untrained part too", "target to_q, to_k and to_v together (add_q_proj, add_k_proj and add_v_proj "
            "for the text stream), or remove \"kohya\" from output.formats")
    return torch.cat([parts[p]["scale"] for p in (0, 1, 2)], dim=0).contiguous()


def _fuse(parts: dict[int, dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacked down matrices and a block-diagonal up matrix over the three q/k/v outputs (a part
    not trained has zero rows)."""
    first = next(iter(parts.values()))
    rank, width = first["A"].shape[0], first["B"].shape[0]
    present = sorted(parts)
    down = torch.cat([parts[p]["A"] for p in present], dim=0)
    up = first["B"].new_zeros((3 * width, rank * len(present)))
    for column, p in enumerate(present):
        up[p * width:(p + 1) * width, column * rank:(column + 1) * rank] = parts[p]["B"]
    return down.contiguous(), up
