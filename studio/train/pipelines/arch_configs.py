"""The published architectures of the families built from component configs (SD1.5, SDXL, SD3-medium).

Each such family's own pipeline module (`studio/train/pipelines/<family>.py`) declares its
`ARCHITECTURE`: the components at full size, what its denoiser takes, the sampler and tokenizers
it ships with. The tables here are found by name from the family registry, so this module names
no family. One source for the parameter counter (benchmarks/count_parameters.py), the full-size
random-weight pipelines (`studio-train tiny --full-size`), the offline single-file configs and the
GPU benchmarks: memory and speed depend on these shapes, not on the weights' values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from studio.train.pipelines import family_module

VAE_4CH: dict[str, Any] = {
    "in_channels": 3, "out_channels": 3, "latent_channels": 4, "layers_per_block": 2,
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
}
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

# Modules the LoRA wraps, as the diffusers training scripts choose them.
UNET_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")
TEXT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj")
# A component: (class name, config, role: "denoiser", "vae", "text_encoder" or "text_encoder_t5").
Component = tuple[str, dict[str, Any], str]


@dataclass(frozen=True)
class Architecture:
    """A family's published pipeline, as configs: what the counter, the full-size builder and the
    offline single-file configs read."""

    components: dict[str, Component]
    latent_channels: int
    text_tokens: int  # the denoiser's text sequence at full length
    text_dim: int  # the width of the denoiser's text input
    lora_targets: tuple[str, ...]  # the denoiser modules the LoRA wraps by default
    # The sampler the published pipeline ships with (class name, config).
    sampler: tuple[str, dict[str, Any]]
    tokenizers: dict[str, str]  # each CLIP tokenizer and the token it pads with
    index_extras: dict[str, Any] = field(default_factory=dict)  # model_index.json's other entries
    hub_components: tuple[str, ...] = ()  # components only the hub provides (the T5 and its tokenizer)


T = TypeVar("T")


def architecture(family: str) -> Architecture:
    """The `ARCHITECTURE` of the family's own pipeline module; KeyError when it declares none."""
    declared = getattr(family_module(family), "ARCHITECTURE", None)
    if not isinstance(declared, Architecture):
        raise KeyError(family)
    return declared


def architecture_families() -> tuple[str, ...]:
    """The registered families whose pipeline module declares an `ARCHITECTURE`, in the registry's order."""
    from studio.core.families import FAMILY_NAMES

    found = []
    for name in FAMILY_NAMES:
        try:
            architecture(name)
        except KeyError:
            continue
        found.append(name)
    return tuple(found)


class ByFamily(Mapping[str, T], Generic[T]):
    """One fact of every declared architecture, by family name, read when asked (no import cycle)."""

    def __init__(self, read: Callable[[str], T]) -> None:
        self._read = read

    def __getitem__(self, family: str) -> T:
        return self._read(family)

    def __iter__(self) -> Iterator[str]:
        return iter(architecture_families())

    def __len__(self) -> int:
        return len(architecture_families())


def _native_resolution(name: str) -> int:
    from studio.core.families import family

    architecture(name)
    return family(name).native_resolution


SPECS: Mapping[str, dict[str, Component]] = ByFamily(lambda name: architecture(name).components)
LATENT_CHANNELS: Mapping[str, int] = ByFamily(lambda name: architecture(name).latent_channels)
TEXT_TOKENS: Mapping[str, int] = ByFamily(lambda name: architecture(name).text_tokens)
TEXT_DIM: Mapping[str, int] = ByFamily(lambda name: architecture(name).text_dim)
LORA_TARGETS: Mapping[str, tuple[str, ...]] = ByFamily(lambda name: architecture(name).lora_targets)
NATIVE_RESOLUTION: Mapping[str, int] = ByFamily(_native_resolution)


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
    components = architecture(family).components
    name = next(n for n, spec in components.items() if spec[2] == "denoiser")
    class_name, config, _ = components[name]
    return name, class_name, config
