"""One .safetensors checkpoint of a DreamBooth pipeline in the original (LDM/SGM) layout.

A1111, Forge and ComfyUI load SD1.x and SDXL checkpoints as single files with the
original key names (`model.diffusion_model.*`, `first_stage_model.*`,
`cond_stage_model.*` / `conditioner.embedders.*`). diffusers reads such files but
has no writer, so the diffusers-to-original renaming is done here, driven by each
model's own config (block counts, layers per block) rather than by the full-size
layout. Each family that has such a file says how its text encoders are named there
(`encoders_to_original` in its pipeline module, found by name). SD3 has no writer here: its
MMDiT layout needs fused projections that the studio does not write, and the run warns instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from studio.train.pipelines.hub_layout import text_encoder_key

_RESNET_PARTS = [("in_layers.0", "norm1"), ("in_layers.2", "conv1"), ("out_layers.0", "norm2"),
                 ("out_layers.3", "conv2"), ("emb_layers.1", "time_emb_proj"), ("skip_connection", "conv_shortcut")]
_UNET_TOP = {
    "time_embedding.linear_1.": "time_embed.0.", "time_embedding.linear_2.": "time_embed.2.",
    "add_embedding.linear_1.": "label_emb.0.0.", "add_embedding.linear_2.": "label_emb.0.2.",
    "conv_in.": "input_blocks.0.0.", "conv_norm_out.": "out.0.", "conv_out.": "out.2.",
}


def _unet_prefixes(config: Any) -> list[tuple[str, str]]:
    """(diffusers prefix, original prefix) of every UNet block, from the UNet's config."""
    per = int(config.layers_per_block)
    down_types, up_types = list(config.down_block_types), list(config.up_block_types)
    pairs: list[tuple[str, str]] = []
    for i, kind in enumerate(down_types):
        for j in range(per):
            pairs.append((f"down_blocks.{i}.resnets.{j}.", f"input_blocks.{(per + 1) * i + j + 1}.0."))
            if "CrossAttn" in kind:
                pairs.append((f"down_blocks.{i}.attentions.{j}.", f"input_blocks.{(per + 1) * i + j + 1}.1."))
        if i < len(down_types) - 1:
            pairs.append((f"down_blocks.{i}.downsamplers.0.conv.", f"input_blocks.{(per + 1) * (i + 1)}.0.op."))
    for i, kind in enumerate(up_types):
        attention = "CrossAttn" in kind
        for j in range(per + 1):
            pairs.append((f"up_blocks.{i}.resnets.{j}.", f"output_blocks.{(per + 1) * i + j}.0."))
            if attention:
                pairs.append((f"up_blocks.{i}.attentions.{j}.", f"output_blocks.{(per + 1) * i + j}.1."))
        if i < len(up_types) - 1:
            pairs.append((f"up_blocks.{i}.upsamplers.0.", f"output_blocks.{(per + 1) * i + per}.{2 if attention else 1}."))
    pairs.append(("mid_block.attentions.0.", "middle_block.1."))
    pairs += [(f"mid_block.resnets.{j}.", f"middle_block.{2 * j}.") for j in range(2)]
    return pairs


def original_unet_names(config: Any) -> Callable[[str], str]:
    """The original (LDM/SGM) name of a diffusers UNet weight or module name, for a UNet of `config`
    (`down_blocks.1.attentions.0.proj_in` -> `input_blocks.4.1.proj_in`); ValueError for a name the
    original layout has no place for."""
    prefixes = _unet_prefixes(config)

    def original(key: str) -> str:
        dotted = key + "."  # a module's name matches the prefixes as a weight's does
        name = next((new + dotted[len(old):] for old, new in _UNET_TOP.items() if dotted.startswith(old)), None)
        if name is None:
            old, new = next((p for p in prefixes if dotted.startswith(p[0])), ("", ""))
            if not old:
                raise ValueError(f"the UNet weight {key} has no place in the original layout")
            rest = dotted[len(old):]
            if ".resnets." in old:
                for original_part, diffusers_part in _RESNET_PARTS:
                    rest = rest.replace(diffusers_part, original_part)
            name = new + rest
        return name.removesuffix(".")

    return original


def unet_to_original(unet: torch.nn.Module) -> dict[str, torch.Tensor]:
    original = original_unet_names(unet.config)
    return {f"model.diffusion_model.{original(key)}": value for key, value in unet.state_dict().items()}


def vae_to_original(vae: torch.nn.Module) -> dict[str, torch.Tensor]:
    config: Any = vae.config
    blocks, per = len(config.block_out_channels), int(config.layers_per_block)
    pairs = [("encoder.conv_norm_out.", "encoder.norm_out."), ("decoder.conv_norm_out.", "decoder.norm_out.")]
    for i in range(blocks):
        pairs += [(f"encoder.down_blocks.{i}.resnets.{j}.", f"encoder.down.{i}.block.{j}.") for j in range(per)]
        pairs += [(f"decoder.up_blocks.{i}.resnets.{j}.", f"decoder.up.{blocks - 1 - i}.block.{j}.")
                  for j in range(per + 1)]
        if i < blocks - 1:
            pairs.append((f"encoder.down_blocks.{i}.downsamplers.0.", f"encoder.down.{i}.downsample."))
            pairs.append((f"decoder.up_blocks.{i}.upsamplers.0.", f"decoder.up.{blocks - 1 - i}.upsample."))
    for part in ("encoder", "decoder"):
        pairs += [(f"{part}.mid_block.resnets.{j}.", f"{part}.mid.block_{j + 1}.") for j in range(2)]
        pairs.append((f"{part}.mid_block.attentions.0.", f"{part}.mid.attn_1."))
    attention = {"group_norm.": "norm.", "to_q.": "q.", "to_k.": "k.", "to_v.": "v.", "to_out.0.": "proj_out."}
    out: dict[str, torch.Tensor] = {}
    for key, value in vae.state_dict().items():
        old, new = next((p for p in pairs if key.startswith(p[0])), ("", ""))
        rest = key[len(old):]
        if ".attentions." in old:
            part = next(p for p in attention if rest.startswith(p))
            rest = attention[part] + rest[len(part):]
            if rest.endswith(".weight") and value.ndim == 2:
                value = value[:, :, None, None]  # the original attention uses 1x1 convolutions
        else:
            rest = rest.replace("conv_shortcut", "nin_shortcut")
        out[f"first_stage_model.{new}{rest}"] = value
    return out


def clip_keys(encoder: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The encoder's weights under the original CLIP names (text_model.*), which newer transformers flatten."""
    return {text_encoder_key(k): v for k, v in encoder.state_dict().items()}


def is_open_clip(encoder: torch.nn.Module) -> bool:
    """Whether a text encoder is an OpenCLIP one (SD 2.x's ViT-H, SDXL's bigG), whose original layout is
    OpenCLIP's: those compute with gelu, OpenAI's CLIP-L (SD 1.x, SDXL's first) with quick_gelu."""
    config: Any = getattr(encoder, "config", None)
    return getattr(config, "hidden_act", None) == "gelu"


def open_clip_to_original(encoder: torch.nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """An OpenCLIP encoder (SDXL's second, SD 2.x's) in OpenCLIP's layout (fused q/k/v, resblocks, transposed
    projection)."""
    top = {"text_model.embeddings.position_embedding.weight": "positional_embedding",
           "text_model.embeddings.token_embedding.weight": "token_embedding.weight",
           "text_model.final_layer_norm.weight": "ln_final.weight",
           "text_model.final_layer_norm.bias": "ln_final.bias"}
    parts = [("layer_norm1", "ln_1"), ("layer_norm2", "ln_2"), ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj"),
             ("self_attn.out_proj", "attn.out_proj")]
    out: dict[str, torch.Tensor] = {}
    fused: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in clip_keys(encoder).items():
        if key in top:
            out[prefix + top[key]] = value
        elif key == "text_projection.weight":
            out[prefix + "text_projection"] = value.T.contiguous()
        elif key.startswith("text_model.encoder.layers."):
            rest = "transformer.resblocks." + key[len("text_model.encoder.layers."):]
            for name in ("q_proj", "k_proj", "v_proj"):
                if f".self_attn.{name}." in rest:
                    layer, kind = rest.split(f".self_attn.{name}.")
                    fused.setdefault(f"{layer}.attn.in_proj_{kind}", {})[name] = value
                    break
            else:
                for diffusers, original in parts:
                    rest = rest.replace(diffusers, original)
                out[prefix + rest] = value
    for name, qkv in fused.items():
        out[prefix + name] = torch.cat([qkv["q_proj"], qkv["k_proj"], qkv["v_proj"]], dim=0)
    return out


def writes_single_file(family: str) -> bool:
    """Whether the studio writes `family`'s pipeline as one checkpoint in the original layout."""
    from studio.train.pipelines import family_module

    return hasattr(family_module(family), "encoders_to_original")


def original_state_dict(family: str, components: Any) -> dict[str, torch.Tensor]:
    """The whole pipeline's weights under the original single-file names."""
    from studio.train.pipelines import family_module

    module: Any = family_module(family)
    if not hasattr(module, "encoders_to_original"):
        raise ValueError(f"no single-file layout for family {family}")
    state = {**unet_to_original(components.denoiser), **vae_to_original(components.vae)}
    state.update(module.encoders_to_original(components.text_encoders))
    return state


def save_single_file(path: Path, family: str, components: Any, dtype: torch.dtype,
                     metadata: dict[str, str], markers: tuple[str, ...] = ()) -> Path:
    """Write the checkpoint (contiguous CPU tensors in `dtype`) with string metadata and the empty marker
    tensors `markers` (`v_pred`, `ztsnr`: see `prediction_markers`)."""
    from safetensors.torch import save_file

    state = {k: v.detach().to("cpu", dtype).contiguous() if v.is_floating_point() else v.detach().cpu().contiguous()
             for k, v in original_state_dict(family, components).items()}
    state.update({marker: torch.tensor([]) for marker in markers})
    save_file(state, str(path), metadata=metadata)
    return path


def prediction_markers(prediction: str, scheduler: Any) -> tuple[str, ...]:
    """The marker tensors by which a checkpoint says it predicts v (`v_pred`) and was trained with zero terminal
    SNR (`ztsnr` beside it): ComfyUI and A1111/Forge load an SDXL checkpoint as v-prediction by them (without,
    as epsilon, and its images come out wrong), and the studio reads them back the same way."""
    if prediction != "v":
        return ()
    config: Any = getattr(scheduler, "config", None)
    return ("v_pred", "ztsnr") if getattr(config, "rescale_betas_zero_snr", False) else ("v_pred",)
