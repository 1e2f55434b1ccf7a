"""LoHa and LoKr files in the LyCORIS format: kohya module names (`lora_unet_*`, `lora_te*_*`,
`lora_transformer_*`) with the factors as `.hada_w1_a` ... `.lokr_w2_b` and an `.alpha` per module.

This is the layout the LyCORIS package writes and what ComfyUI (comfy/lora.py: each module's
`hada_*`/`lokr_*` keys with its alpha), A1111/Forge and sd-scripts read. The scale of a module is
alpha / rank, where ComfyUI and LyCORIS take the rank from the decomposed factor; a LoKr module whose
two factors are both whole (a small layer) has no rank there and a scale of 1, so peft's alpha / r
is folded into its first factor. `load_lycoris` is the studio's own reader: it adds each module's
weight difference, computed as ComfyUI computes it, to a pipeline's weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from studio.train.pipelines.hub_layout import text_encoder_key

# The component each kohya prefix names (the families' renames, such as SD1.x's lora_te_, come on top).
PREFIXES = {"unet": "lora_unet_", "transformer": "lora_transformer_", "text_encoder": "lora_te1_",
            "text_encoder_2": "lora_te2_"}
FACTORS = ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2",
           "lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b", "lokr_t2")


def kohya_module(component: str, module: str, renames: dict[str, str] | None = None) -> str:
    """The kohya name of `module` (a name inside `component`): text encoders keep the hub's `text_model.`."""
    path = text_encoder_key(module) if component.startswith("text_encoder") else module
    name = PREFIXES[component] + path.replace(".", "_")
    for old, new in (renames or {}).items():
        if name.startswith(old):
            name = new + name[len(old):]
    return name


# A family's own naming of its modules in the file: (component, module) -> the file's module name.
Namer = Callable[[str, str], str]


def lycoris_state_dict(
    layers: dict[str, dict[str, torch.Tensor]],
    scales: dict[str, dict[str, float]],
    renames: dict[str, str] | None = None,
    namer: Namer | None = None,
) -> dict[str, torch.Tensor]:
    """peft LoHa/LoKr state dicts keyed by component -> one LyCORIS state dict.

    `scales[component][module]` is peft's alpha / r of each module, which sets its written alpha.
    Modules are named by `namer` when the family has one, else by `kohya_module` with `renames`.
    """
    out: dict[str, torch.Tensor] = {}
    for component, state in layers.items():
        modules: dict[str, dict[str, torch.Tensor]] = {}
        for key, value in state.items():
            module, _, factor = key.rpartition(".")
            if factor not in FACTORS:
                raise ValueError(f"{component}.{key} is not a LoHa or LoKr factor")
            modules.setdefault(module, {})[factor] = value
        for module, factors in modules.items():
            name = namer(component, module) if namer else kohya_module(component, module, renames)
            scale = scales[component][module]
            rank = _rank(factors)
            if rank is None:  # a LoKr of two whole factors: the readers' scale is 1
                factors = {**factors, "lokr_w1": factors["lokr_w1"] * scale}
                rank = 1
            for factor, value in factors.items():
                out[f"{name}.{factor}"] = value.contiguous()
            out[f"{name}.alpha"] = torch.tensor(scale * rank, dtype=torch.float32)
    return out


def _rank(factors: dict[str, torch.Tensor]) -> int | None:
    """The rank the readers divide alpha by: ComfyUI's `dim` (the decomposed factor's, w2 before w1)."""
    for key in ("hada_w1_b", "lokr_w2_b", "lokr_w1_b"):
        if key in factors:
            return int(factors[key].shape[0])
    return None


def module_delta(factors: dict[str, torch.Tensor], alpha: float | None, shape: torch.Size) -> torch.Tensor:
    """One module's weight difference as ComfyUI computes it (strength 1), in fp32."""
    f = {k: v.float() for k, v in factors.items()}
    rank = _rank(factors)
    scale = alpha / rank if alpha is not None and rank is not None else 1.0
    if "hada_w1_a" in f:
        if "hada_t1" in f:
            m1 = torch.einsum("i j k l, j r, i p -> p r k l", f["hada_t1"], f["hada_w1_b"], f["hada_w1_a"])
            m2 = torch.einsum("i j k l, j r, i p -> p r k l", f["hada_t2"], f["hada_w2_b"], f["hada_w2_a"])
        else:
            m1, m2 = f["hada_w1_a"] @ f["hada_w1_b"], f["hada_w2_a"] @ f["hada_w2_b"]
        return (m1 * m2).reshape(shape) * scale
    w1 = f["lokr_w1"] if "lokr_w1" in f else f["lokr_w1_a"] @ f["lokr_w1_b"]
    if "lokr_w2" in f:
        w2 = f["lokr_w2"]
    elif "lokr_t2" in f:
        w2 = torch.einsum("i j k l, j r, i p -> p r k l", f["lokr_t2"], f["lokr_w2_b"], f["lokr_w2_a"])
    else:
        w2 = f["lokr_w2_a"] @ f["lokr_w2_b"]
    if w2.dim() == 4:
        w1 = w1[:, :, None, None]
    return torch.kron(w1, w2).reshape(shape) * scale


def load_lycoris(path: Path, components: dict[str, torch.nn.Module], renames: dict[str, str] | None = None,
                 strength: float = 1.0, namer: Namer | None = None) -> list[str]:
    """Add a LyCORIS file's differences to the weights of `components` (component name -> module).

    Returns the kohya names applied; a module of the file that none of the components has is an
    error naming it (the file is for another model).
    """
    from safetensors.torch import load_file

    state = load_file(str(path))
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        name, _, factor = key.partition(".")
        grouped.setdefault(name, {})[factor] = value
    targets = dict(_named_layers(components, renames, namer))
    applied = []
    for name, factors in grouped.items():
        layer = targets.get(name)
        if layer is None:
            raise ValueError(f"{path.name}: {name} names no layer of this model (is the file for another model?)")
        alpha = factors.pop("alpha", None)
        weight = layer.weight
        delta = module_delta(factors, None if alpha is None else float(alpha), weight.shape)
        with torch.no_grad():
            weight.add_((strength * delta).to(weight.dtype))
        applied.append(name)
    return applied


def _named_layers(components: dict[str, torch.nn.Module], renames: dict[str, str] | None,
                  namer: Namer | None) -> Iterable[tuple[str, torch.nn.Linear | torch.nn.Conv2d]]:
    for component, root in components.items():
        for module, layer in root.named_modules():
            if isinstance(layer, torch.nn.Linear | torch.nn.Conv2d):
                yield (namer(component, module) if namer else kohya_module(component, module, renames)), layer
