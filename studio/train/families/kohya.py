"""LoRA files in the kohya naming (`lora_unet_*`, `lora_te*_*`) that ComfyUI, A1111 and Forge read.

peft-format layers go through diffusers' `convert_state_dict_to_kohya`; each family
says how its components are named (SD1.x's single encoder is `lora_te_`, SDXL's are
`lora_te1_`/`lora_te2_`, SD3's transformer `lora_transformer_` as ComfyUI reads it).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from studio.core.families import family
from studio.train.errors import TrainError
from studio.train.families.model_spec import model_spec
from studio.train.networks.dora import DORA_SCALE, MAGNITUDE
from studio.train.pipelines.hub_layout import text_encoder_key

DIFFUSERS_LORA_FILE = "pytorch_lora_weights.safetensors"
SAVE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# kohya key prefix -> the component it belongs to (for each module's alpha).
_OWNERS = {"lora_unet_": "unet", "lora_transformer_": "transformer", "lora_te1_": "text_encoder",
           "lora_te2_": "text_encoder_2", "lora_te_": "text_encoder"}
_PREFIX_OF = {"unet": "lora_unet_"}  # the component whose convolutions a LoCon adapts


def clip_key(component: str, key: str) -> str:
    """Kohya names follow the original CLIP layout (text_model.encoder...), which newer
    transformers versions flatten away; put the prefix back for text encoders."""
    return text_encoder_key(key) if component.startswith("text_encoder") else key


def kohya_state_dict(
    layers: dict[str, dict[str, torch.Tensor]],
    adapter_configs: dict[str, dict[str, Any]],
    renames: dict[str, str] | None = None,
) -> dict[str, torch.Tensor]:
    """peft layers keyed by component -> one kohya state dict; `renames` maps prefixes (old -> new).

    A DoRA layer's magnitudes become `<kohya module>.dora_scale`, the value ComfyUI applies (each
    component's config holds them as `dora_scales`, networks/dora.py)."""
    from diffusers.utils import convert_state_dict_to_kohya

    prefixed = {f"{name}.{clip_key(name, key)}": _dora_scale(adapter_configs, name, key, value)
                for name, sd in layers.items() for key, value in sd.items()}
    # The convolution layers of a LoCon have their own alpha (the config's alpha_pattern, by full name).
    conv_alphas = {f"{_PREFIX_OF[owner]}{pattern.lstrip('^').replace('.', '_')}": float(alpha)
                   for owner, config in adapter_configs.items() if owner in _PREFIX_OF
                   for pattern, alpha in (config.get("alpha_pattern") or {}).items()}
    out: dict[str, torch.Tensor] = {}
    for key, value in convert_state_dict_to_kohya(prefixed).items():
        # diffusers' converter leaves some of the module's dots in a magnitude's name, and names it
        # `dora_scale` for some modules (SD3's attention) and leaves `lora_magnitude_vector` for others.
        for suffix in (f".{MAGNITUDE}", f".{DORA_SCALE}"):
            if key.endswith(suffix):
                key = f"{key.removesuffix(suffix).replace('.', '_')}.{DORA_SCALE}"
        # Prefixed once the name is whole: the magnitude of a top-level module (SD3's `context_embedder`,
        # `proj_out`) kept its dot until then and was written without the prefix its lora_down/lora_up have.
        if key.startswith("transformer_"):
            key = "lora_" + key
        for old, new in (renames or {}).items():
            if key.startswith(old):
                key = new + key[len(old):]
        if key.endswith(".alpha"):
            owner = next((c for p, c in _OWNERS.items() if key.startswith(p)), "")
            value = torch.tensor(conv_alphas.get(key.removesuffix(".alpha"))
                                 or float(adapter_configs.get(owner, {}).get("lora_alpha", value.item())))
        out[key] = value.contiguous()
    return out


def _dora_scale(adapter_configs: dict[str, dict[str, Any]], component: str, key: str,
                value: torch.Tensor) -> torch.Tensor:
    """A tensor as the kohya file holds it: a DoRA magnitude vector is replaced by ComfyUI's dora_scale."""
    if not key.endswith(f".{MAGNITUDE}"):
        return value
    scales = adapter_configs.get(component, {}).get("dora_scales") or {}
    module = key.removesuffix(f".{MAGNITUDE}")
    if module not in scales:
        raise ValueError(f"the DoRA layer {component}.{module} has no dora_scale (outputs.py computes them)")
    return scales[module].to(value.dtype)


def save_kohya_file(
    folder: Path,
    name: str,
    state: dict[str, torch.Tensor],
    metadata: dict[str, Any],
) -> Path:
    """Write `name`.safetensors (never over the diffusers file) with string metadata."""
    from safetensors.torch import save_file

    path = folder / f"{name}.safetensors"
    if path.name == DIFFUSERS_LORA_FILE:
        path = folder / f"{name}-kohya.safetensors"
    text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}
    save_file(state, str(path), metadata=text)
    return path


def kohya_metadata(config: Any, base_version: str, architecture: str, extra: dict[str, str]) -> dict[str, str]:
    """The network's ss_* keys and the model-spec fields LoRA browsers show, under the run's `extra`."""
    method = config.method
    args: dict[str, str] = {}
    if method.network in ("loha", "lokr"):
        args["algo"] = method.network
        if method.network == "lokr":
            args["factor"] = str(method.lokr_factor or -1)
    if method.network == "locon" or method.conv_rank is not None:
        conv_rank = method.conv_rank or method.rank
        args["conv_dim"] = str(conv_rank)
        args["conv_alpha"] = str(method.conv_alpha if method.conv_alpha is not None else float(conv_rank))
    clip_skip = family(config.model.family).setting("model.clip_skip") is not None
    if method.use_dora:  # sd-scripts' own network has no DoRA: LyCORIS' LoRA with its weight decomposition does
        args = {"algo": "locon" if "conv_dim" in args else "lora", **args, "dora_wd": "True", "wd_on_output": "True"}
    return {
        # sd-scripts' own LoRA module (with conv_dim for LoCon), or the LyCORIS package's kohya network.
        "ss_network_module": "lycoris.kohya" if "algo" in args else "networks.lora",
        **({"ss_network_args": json.dumps(args)} if args else {}),
        "ss_network_dim": str(config.method.rank),
        "ss_network_alpha": str(config.method.lora_alpha),
        "ss_network_dropout": str(config.method.dropout),
        "ss_base_model_version": base_version,
        # Where the family's declaration has clip skip (SD1.x), as sd-scripts writes it; "None" elsewhere.
        "ss_clip_skip": str(config.model.clip_skip) if clip_skip else "None",
        "ss_v2": str(base_version.startswith("sd_v2")),  # A1111/Forge list a LoRA for SD 2.x models by it
        **model_spec(config, architecture, lora=True, now=time.time()),
        # The run's own: an EMA file's title, the prediction type the base model's scheduler trained.
        **extra,
    }


def cast_layers(layers: dict[str, dict[str, torch.Tensor]], precision: str) -> dict[str, dict[str, torch.Tensor]]:
    dtype = SAVE_DTYPES[precision]
    return {name: {k: v.detach().to("cpu", dtype) for k, v in sd.items()} for name, sd in layers.items()}


_PEFT_KEY = re.compile(r"^(.+)\.lora_([AB])(?:\.default)?\.weight$")


def renamed_state_dict(peft_layers: dict[str, torch.Tensor], alpha: float, name_of: Callable[[str], str],
                       dora_scales: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """peft-format LoRA layers of one component, each module under `name_of(module)` (a family's reader layout,
    one file module per trained module; it raises TrainError for a module its readers cannot place), as
    `.lora_down/.lora_up.weight` and `.alpha`; a DoRA layer's magnitudes as `.dora_scale`, the value ComfyUI
    applies (`dora_scales`, networks/dora.py)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in sorted(peft_layers.items()):
        if key.endswith(f".{MAGNITUDE}"):
            module = key.removesuffix(f".{MAGNITUDE}")
            out[f"{name_of(module)}.{DORA_SCALE}"] = (dora_scales or {})[module].to(value.dtype)
            continue
        match = _PEFT_KEY.match(key)
        if not match:
            raise TrainError("checkpoint", f"unexpected LoRA tensor {key} (neither lora_A nor lora_B)",
                             "train again from the last checkpoint")
        module, which = match.groups()
        name = name_of(module)
        out[f"{name}.{'lora_down' if which == 'A' else 'lora_up'}.weight"] = value.contiguous()
        out[f"{name}.alpha"] = torch.tensor(float(alpha))
    return out
