"""The diffusers-format LoRA file carries its strength in its weights.

peft scales a LoRA layer by alpha / rank. A diffusers-format file has no `.alpha` keys: its alpha lives
only in the `<component>_lora_adapter_metadata` JSON, which diffusers reads since 0.34 but diffusers
0.32 (what kohya's scripts and many UIs pin) and ComfyUI (comfy/weight_adapter/lora.py: no alpha key,
scale 1) do not, so they applied such a file at rank / alpha times its trained strength. Here
alpha / rank is multiplied into each lora_B (up) weight and the metadata says alpha = rank: a reader
that reads the metadata scales by 1, one that does not scales by 1 too, and both apply the trained
change once. DoRA is unchanged by it: its magnitudes divide by the norm of W + scale * B @ A, which the
product keeps.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch

_UP = re.compile(r"^(.+)\.lora_B(?:\.default)?\.weight$")


def _pattern_value(patterns: dict[str, Any], module: str) -> Any | None:
    """The value of the first pattern that names `module`, matched as peft matches alpha_pattern and
    rank_pattern (peft.utils.other.get_pattern_key: the pattern ends the name, after a dot or at its start)."""
    for pattern, value in patterns.items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return None


def baked(layers: dict[str, torch.Tensor], config: dict[str, Any] | None,
          ) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """One component's peft-format LoRA layers with each module's alpha / rank (alpha / sqrt(rank) with
    rsLoRA) multiplied into its lora_B, and its peft config saying alpha = rank for every module.
    Without a config (nothing says the strength) the layers are returned as they are."""
    if not config or "lora_alpha" not in config:
        return layers, config
    rank_pattern: dict[str, Any] = dict(config.get("rank_pattern") or {})
    alpha_pattern: dict[str, Any] = dict(config.get("alpha_pattern") or {})
    rslora = bool(config.get("use_rslora"))
    out: dict[str, torch.Tensor] = {}
    for key, value in layers.items():
        match = _UP.match(key)
        if match:
            module = match.group(1)
            rank = value.shape[1]  # lora_B is (out, rank, ...)
            alpha = _pattern_value(alpha_pattern, module)
            alpha = float(config["lora_alpha"] if alpha is None else alpha)
            scale = alpha / (math.sqrt(rank) if rslora else rank)
            value = (value.float() * scale).to(value.dtype)
        out[key] = value
    rank = int(config["r"])
    # Every module's alpha is now its rank: the default ones', the patterned ranks' and alphas' too.
    new_alphas = {**{pattern: rank_pattern.get(pattern, rank) for pattern in alpha_pattern}, **rank_pattern}
    return out, {**config, "lora_alpha": rank, "alpha_pattern": new_alphas, "use_rslora": False}
