"""Full-size SD1.5, SDXL and SD3-medium pipelines with random weights, from the published configs.

Counting happens on the meta device (no memory, no time); real tensors are made only
when a folder is asked for, since memory and speed depend on shapes, not weight values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from studio.core.dataset.demo_shapes import CAPTION_WORDS
from studio.train.pipelines.arch_configs import PIPELINES, SPECS, build_component
from studio.train.pipelines.hub_layout import write_hub_layout
from studio.train.pipelines.tiny import EXTRA_WORDS, own_module
from studio.train.pipelines.tiny_tokenizer import write_tokenizer

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def components(family: str, device: str | torch.device = "meta", t5: bool = True) -> dict[str, torch.nn.Module]:
    """Every network of `family` at full size (T5 only for SD3 and when `t5`)."""
    out = {}
    for name, (class_name, config, _role) in SPECS[family].items():
        if name == "text_encoder_3" and not t5:
            continue
        out[name] = build_component(class_name, config, device)
    return out


def parameter_counts(family: str, t5: bool = True) -> dict[str, int]:
    return {name: sum(p.numel() for p in module.parameters())
            for name, module in components(family, "meta", t5).items()}


def write_full_size_pipeline(family: str, folder: str | Path, dtype: str = "fp16", t5: bool = False,
                             seed: int = 0, device: str = "cpu") -> Path:
    """Write a loadable diffusers folder with random weights (several GB: SDXL about 7 GB in fp16).

    `device="cuda"` draws the weights on the GPU: seconds instead of the CPU's minute.
    """
    import diffusers
    from transformers import CLIPTokenizer

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    parts: dict[str, Any] = {name: module.to(_DTYPES[dtype]).to("cpu")
                             for name, module in components(family, device, t5).items()}
    tokenizer = CLIPTokenizer.from_pretrained(write_tokenizer(out / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], 77))
    parts["tokenizer"] = tokenizer
    schedule: dict[str, Any] = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
                                "num_train_timesteps": 1000, "steps_offset": 1}
    if family == "sd15":
        parts.update(scheduler=diffusers.PNDMScheduler(skip_prk_steps=True, **schedule), safety_checker=None,
                     feature_extractor=None, requires_safety_checker=False)
    elif family == "sdxl":
        parts.update(tokenizer_2=tokenizer, add_watermarker=False,
                     scheduler=diffusers.EulerDiscreteScheduler(timestep_spacing="leading", **schedule))
    else:
        from studio.train.pipelines.tiny import _t5_tokenizer

        parts.update(tokenizer_2=tokenizer, scheduler=diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0),
                     tokenizer_3=_t5_tokenizer(out, [*CAPTION_WORDS, *EXTRA_WORDS]) if t5 else None)
        parts.setdefault("text_encoder_3", None)
    pipeline = getattr(diffusers, PIPELINES[family])(**parts)
    pipeline.save_pretrained(out, safe_serialization=True)
    write_hub_layout(out)
    return out


def write_random_checkpoint(path: str | Path, family: str, dtype: str = "fp16", seed: int = 0) -> Path:
    """A full-size single-file checkpoint in the original layout with random weights (SD1.5: 2.0 GB in fp16).

    Weights are drawn straight into empty tensors (no layer initialisers), so SD1.5 takes
    about half a minute on two CPU cores.
    """
    from studio.train.components import Components
    from studio.train.pipelines.single_file import save_single_file

    parts = components(family, "meta", t5=False)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in parts.values():
            module.to_empty(device="cpu")
            for p in module.parameters():
                p.normal_(0.0, 0.02, generator=generator)
            for name, buffer in module.named_buffers():
                if name.endswith("position_ids"):
                    buffer.copy_(torch.arange(buffer.shape[-1]).expand_as(buffer))
                elif buffer.is_floating_point():
                    buffer.zero_()
    denoiser = parts.pop("unet")
    vae = parts.pop("vae")
    return save_single_file(Path(path), family, Components(denoiser, vae, list(parts.values()), [], None),
                            _DTYPES[dtype], {})


def own_full_size(family: str) -> Any | None:
    """`studio-train tiny FAMILY --full-size [--size S]` of a family that builds its own pipelines: its
    `full_size_main(args)`, or None."""
    module = own_module(family)
    return None if module is None else module.full_size_main


def split_model_key(key: str) -> tuple[str, str | None]:
    """A model key (`sd15`, `flux2-klein-4b`: a family, and a size for a family of several) -> (family, size)."""
    from studio.core.families import FAMILIES

    for spec in FAMILIES:
        if key == spec.name:
            return spec.name, None
        if spec.size_bases and key.startswith(spec.name + "-") and key[len(spec.name) + 1:] in spec.size_bases:
            return spec.name, key[len(spec.name) + 1:]
    raise ValueError(f"no model family {key!r}")


def write_acceptance_model(key: str, folder: Path, tiny: bool) -> Path:
    """A model of `key` (a family, or family-size) with random weights into `folder`: tiny, or full size (the
    single-file checkpoints load fastest; a family of its own pipeline module writes its folder in bf16, on
    the GPU when there is one)."""
    from studio.train.pipelines.tiny import build_tiny_pipeline

    name, size = split_model_key(key)
    if tiny:
        return build_tiny_pipeline(name, folder / f"tiny-{key}")
    module = own_module(name)
    if module is not None:
        return module.write_full_size(size, folder / key, torch.bfloat16,
                                      device="cuda" if torch.cuda.is_available() else "cpu")
    if "transformer" in SPECS[name]:  # a diffusers folder (SD3-medium, without T5)
        return write_full_size_pipeline(name, folder / name, dtype="fp16", t5=False)
    return write_random_checkpoint(folder / f"{name}.safetensors", name)
