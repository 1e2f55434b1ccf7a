"""Full-size pipelines of every family with random weights, and the one parameter counter.

A family of published component configs (an `ARCHITECTURE` in its pipeline module: SD1.5, SDXL,
SD3-medium) is built here from them; a family that builds its networks itself (FLUX.2 [klein],
Z-Image) gives `full_size_components(size, device)` and `write_full_size(...)` in its module. Both
are found by name. Counting happens on the meta device (no memory, no time); real tensors are made
only when a folder is asked for, since memory and speed depend on shapes, not weight values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from studio.core.dataset.demo_shapes import CAPTION_WORDS
from studio.core.families import family as declared
from studio.train.pipelines import family_module
from studio.train.pipelines.arch_configs import Architecture, architecture, build_component
from studio.train.pipelines.hub_layout import write_hub_layout
from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS, write_tokenizer

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
T5_ROLE = "text_encoder_t5"
RANDOM_BLOCK = 2**20 + 1  # the random values a full-size checkpoint is filled from (odd: no layer lines up with it)


def _architecture(family: str) -> Architecture | None:
    try:
        return architecture(family)
    except KeyError:
        return None


def components(family: str, device: str | torch.device = "meta", t5: bool = True,
               size: str | None = None) -> dict[str, torch.nn.Module]:
    """Every network of `family` (of `size`, for a family of several) at full size (a T5 only when `t5`)."""
    arch = _architecture(family)
    if arch is None:
        module = family_module(family)
        if module is None or not hasattr(module, "full_size_components"):
            raise ValueError(f"no full-size pipeline for family {family!r}")
        built: dict[str, torch.nn.Module] = module.full_size_components(size, device)
        return built
    return {name: build_component(class_name, config, device)
            for name, (class_name, config, role) in arch.components.items() if t5 or role != T5_ROLE}


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def parameter_counts(family: str, size: str | None = None, t5: bool = True) -> dict[str, int]:
    """Each full-size network's parameters, by component name (counted on the meta device)."""
    return {name: parameter_count(module) for name, module in components(family, "meta", t5, size).items()}


def write_full_size_pipeline(family: str, folder: str | Path, dtype: str = "fp16", t5: bool = False,
                             seed: int = 0, device: str = "cpu", size: str | None = None) -> Path:
    """Write a loadable diffusers folder with random weights (several GB: SDXL about 7 GB in fp16).

    `device="cuda"` draws the weights on the GPU: seconds instead of the CPU's minute.
    """
    import diffusers
    from transformers import CLIPTokenizer

    arch = _architecture(family)
    if arch is None:
        module = family_module(family)
        if module is None or not hasattr(module, "write_full_size"):
            raise ValueError(f"no full-size pipeline for family {family!r}")
        written: Path = module.write_full_size(size, folder, DTYPES[dtype], seed=seed, device=device)
        return written
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    parts: dict[str, Any] = {name: module.to(DTYPES[dtype]).to("cpu")
                             for name, module in components(family, device, t5).items()}
    parts.update(dict.fromkeys((name for name in arch.components if name not in parts), None))
    tokenizer = CLIPTokenizer.from_pretrained(write_tokenizer(out / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], 77))
    parts.update(family_module(family).full_size_parts(tokenizer, out, t5))  # type: ignore[union-attr]
    pipeline = getattr(diffusers, declared(family).pipeline_class)(**parts)
    pipeline.save_pretrained(out, safe_serialization=True)
    write_hub_layout(out)
    return out


def write_random_checkpoint(path: str | Path, family: str, dtype: str = "fp16", seed: int = 0) -> Path:
    """A full-size single-file checkpoint in the original layout with random weights (SD1.5: 2.0 GB in fp16).

    The networks are made straight in `dtype` (no full-precision copy to convert) and filled from one seeded
    block of random values, read on from where the last weight stopped, so no two weights are alike and none
    repeats within its first million values. Drawing a billion values one by one took most of half a minute
    on two CPU cores; this takes a few seconds, and memory and speed depend on shapes, not weight values.
    """
    from studio.train.components import Components
    from studio.train.pipelines.single_file import save_single_file

    parts = components(family, "meta", t5=False)
    generator = torch.Generator().manual_seed(seed)
    block = torch.empty(RANDOM_BLOCK, dtype=DTYPES[dtype]).normal_(0.0, 0.02, generator=generator)
    twice, offset = torch.cat([block, block]), 0
    with torch.no_grad():
        for module in parts.values():
            torch.nn.Module.to(module, DTYPES[dtype])  # the plain cast: the diffusers one warns about fp32 modules
            module.to_empty(device="cpu")
            for p in module.parameters():
                flat = p.view(-1)
                for start in range(0, flat.numel(), RANDOM_BLOCK):
                    count = min(RANDOM_BLOCK, flat.numel() - start)
                    flat[start:start + count].copy_(twice[offset:offset + count])
                    offset = (offset + count) % RANDOM_BLOCK
            for name, buffer in module.named_buffers():
                if name.endswith("position_ids"):
                    buffer.copy_(torch.arange(buffer.shape[-1]).expand_as(buffer))
                elif buffer.is_floating_point():
                    buffer.zero_()
    denoiser = parts.pop(declared(family).denoiser)
    vae = parts.pop("vae")
    return save_single_file(Path(path), family, Components(denoiser, vae, list(parts.values()), [], None),
                            DTYPES[dtype], {})


def split_model_key(key: str) -> tuple[str, str | None]:
    """A model key (a family, or a family and one of its sizes: `<family>-<size>`) -> (family, size)."""
    from studio.core.families import FAMILIES

    for spec in FAMILIES:
        if key == spec.name:
            return spec.name, None
        if spec.size_bases and key.startswith(spec.name + "-") and key[len(spec.name) + 1:] in spec.size_bases:
            return spec.name, key[len(spec.name) + 1:]
    raise ValueError(f"no model family {key!r}")


def write_acceptance_model(key: str, folder: Path, tiny: bool) -> Path:
    """A model of `key` (a family, or family-size) with random weights into `folder`: tiny, or full size (a
    single-file checkpoint where the family has one, which loads fastest; else a diffusers folder: a family
    that builds its own networks in bf16, on the GPU when there is one)."""
    from studio.train.pipelines.single_file import writes_single_file
    from studio.train.pipelines.tiny import build_tiny_pipeline

    name, size = split_model_key(key)
    if tiny:
        return build_tiny_pipeline(name, folder / f"tiny-{key}")
    if _architecture(name) is None:
        return write_full_size_pipeline(name, folder / key, "bf16", size=size,
                                        device="cuda" if torch.cuda.is_available() else "cpu")
    if not writes_single_file(name):  # a diffusers folder (SD3-medium, without T5)
        return write_full_size_pipeline(name, folder / name, dtype="fp16", t5=False)
    return write_random_checkpoint(folder / f"{name}.safetensors", name)
