"""Which peft adapter wraps a module: LoRA, LoCon (LoRA on the convolution layers too), LoHa or LoKr.

peft's LoHa and LoKr hold the very factors the LyCORIS format names (`hada_w1_a` ... `lokr_w2_b`), with
the same shapes and the same scale (alpha / rank), so a trained adapter is written as the file ComfyUI,
A1111/Forge (through the LyCORIS extension built in) and sd-scripts load with no conversion but the names
(lycoris_file.py). Convolution layers are those of the UNet's resnets, down- and upsamplers, as
sd-scripts' LoCon wraps them.
"""

from __future__ import annotations

from typing import Any

import torch

from studio.core.config.schema import MethodSection
from studio.train.errors import TrainError

LYCORIS = ("loha", "lokr")
# The UNet blocks whose convolutions LoCon, LoHa and LoKr adapt (sd-scripts' UNET_TARGET_REPLACE_MODULE_CONV2D_3X3).
CONV_BLOCKS = ("ResnetBlock2D", "Downsample2D", "Upsample2D")
# The layers an adapter wraps (a LoHa or LoKr: linear and convolution layers only).
ADAPTABLE = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Embedding)


def conv_targets(denoiser: torch.nn.Module) -> list[str]:
    """Full names of the Conv2d layers inside the denoiser's resnets, down- and upsamplers."""
    found = []
    for name, module in denoiser.named_modules():
        if type(module).__name__ not in CONV_BLOCKS:
            continue
        for child, layer in module.named_modules():
            if child and isinstance(layer, torch.nn.Conv2d):
                found.append(f"{name}.{child}")
    return found


def check_targets(denoiser: torch.nn.Module, targets: list[str], component: str) -> None:
    """Refuse a name of method.target_modules that wraps nothing: the adapter wraps each layer whose full name is
    the name or ends with "." and it. A name of no layer was skipped without a word when another name matched (a
    typo trained fewer layers than asked) and ended the run with a traceback when none did; a block ("attn1") or
    a list of layers ("to_out") ended it with a traceback too."""
    layers = dict(denoiser.named_modules())
    for target in targets:
        found = [name for name in layers if name == target or name.endswith(f".{target}")]
        if not found:
            raise TrainError("config", f"method.target_modules names \"{target}\", which is no layer of the "
                             f"{component}", "use the names of its linear or convolution layers (to_q, to_k, to_v, "
                             "to_out.0 in attention), or leave method.target_modules empty for the family's own")
        wrong = next((name for name in found if not isinstance(layers[name], ADAPTABLE)), None)
        if wrong is not None:
            inside = [f"{target}.{child}" for child, layer in layers[wrong].named_modules()
                      if child and isinstance(layer, ADAPTABLE)]
            within = f"name the layers inside it ({', '.join(inside[:4])})" if inside else "remove it"
            raise TrainError("config", f"method.target_modules names \"{target}\", a {type(layers[wrong]).__name__} "
                             f"({wrong}), and the adapter wraps linear and convolution layers only",
                             f"{within}, or leave method.target_modules empty for the family's own")


def uses_convolutions(method: MethodSection) -> bool:
    return method.network == "locon" or (method.network in LYCORIS and method.conv_rank is not None)


def adapter_config(method: MethodSection, targets: list[str], rank: int, alpha: float,
                   convolutions: list[str] | None = None) -> Any:
    """The peft config of one component: `targets` at `rank`/`alpha`, `convolutions` (full names) at the
    conv rank and alpha."""
    from peft import LoHaConfig, LoKrConfig, LoraConfig

    conv = list(convolutions or [])
    conv_rank = method.conv_rank or method.rank
    conv_alpha: float = method.conv_alpha if method.conv_alpha is not None else float(conv_rank)
    patterns: dict[str, Any] = {}
    if conv:
        # Anchored at the start: a full name matches itself only (peft matches patterns at a name's end).
        patterns = {"rank_pattern": {f"^{name}": conv_rank for name in conv},
                    "alpha_pattern": {f"^{name}": conv_alpha for name in conv}}
    common: dict[str, Any] = {"r": rank, "alpha": alpha, "target_modules": [*targets, *conv], **patterns}
    if method.network == "loha":
        return LoHaConfig(rank_dropout=method.dropout, init_weights=True, **common)
    if method.network == "lokr":
        # The kept rows scaled up as a LoHa's are (and a LoRA's dropout is): unscaled, training saw a LoKr at
        # (1 - dropout) of its strength on average, and the samples and the file apply all of it.
        return LoKrConfig(rank_dropout=method.dropout, rank_dropout_scale=True, init_weights=True,
                          decompose_factor=method.lokr_factor or -1, **common)
    lora_alpha = common.pop("alpha")
    return LoraConfig(lora_alpha=lora_alpha, lora_dropout=method.dropout, init_lora_weights="gaussian",
                      use_dora=method.use_dora, **common)


def adapter_scales(root: torch.nn.Module) -> dict[str, float]:
    """peft's scale (alpha / r) of each adapted module under `root`, by the module's name."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return {name: float(getattr(module, "scaling")["default"]) for name, module in root.named_modules()  # noqa: B009
            if isinstance(module, BaseTunerLayer) and "default" in getattr(module, "scaling", {})}
