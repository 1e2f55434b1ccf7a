"""What `benchmarks/count_transformer_family.py` needs to count a transformer family on the meta device.

A family whose pipeline module builds its full-size networks itself rather than declaring an
`ARCHITECTURE` of component configs (FLUX.2 [klein], Z-Image) exposes a `COUNTING` of this type: the components at full size, the denoiser's forward inputs at the native
resolution, the layers its LoRA wraps, and how its VAE and text encoder are called. The counter
writes `resources/architectures/<family>[-<size>].json` from it; nothing outside the family's module
names the family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Counting:
    family: str
    sizes: tuple[str, ...]  # the architectures to count; () for a family of one (file <family>.json)
    components: Callable[[str | None], dict[str, Any]]  # full-size transformer, vae, text_encoder (meta)
    # (transformer, batch, dtype, resolution=..., text_tokens=...) -> forward kwargs (meta tensors)
    inputs: Callable[..., dict[str, Any]]
    output: Callable[[Any], Any]  # the forward's result -> one tensor (for a loss)
    lora_modules: tuple[str, ...]  # module names the adapter's default targets end with
    blocks: Callable[[Any], int]  # the transformer's block count
    text_encoder: Callable[[Any, Any, Any], Any]  # (encoder, ids, 4-D mask) -> its forward
    resolution: int = 1024
    text_tokens: int = 512
    latent_channels: int = 16  # the transformer's input channels (after any patchifying)
    vae_channels: int = 16  # the VAE's latent channels (the decode's input)

    def file_name(self, size: str | None) -> str:
        return f"{self.family}-{size}" if size else self.family

    def lora_linear_targets(self, model: Any) -> list[str]:
        from torch import nn

        return [name for name, module in model.named_modules()
                if isinstance(module, nn.Linear) and any(name == t or name.endswith("." + t)
                                                         for t in self.lora_modules)]


def counting_of(family: str) -> Counting:
    """The `COUNTING` of a family's pipeline module (`flux2-klein` -> flux2_klein.py)."""
    from studio.train.pipelines import family_module

    counting = getattr(family_module(family), "COUNTING", None)
    if not isinstance(counting, Counting):
        raise ValueError(f"studio/train/pipelines/{family.replace('-', '_')}.py declares no COUNTING")
    return counting
