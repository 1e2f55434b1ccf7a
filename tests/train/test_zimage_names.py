"""The ComfyUI file of a Z-Image LoRA, checked on the full-size transformer (meta device).

ComfyUI runs Z-Image as its Lumina2 model type and maps `diffusion_model.<diffusers module>` LoRA keys
(lora_down / lora_up / alpha) onto its own fused layers: each of to_q / to_k / to_v onto a third of the
block's `attention.qkv`, to_out.0 onto `attention.out`, the feed-forward and modulation layers as they
are. Every key written for the default targets must be such a module of the real transformer with the
module's shape, and diffusers' reader of that layout must give back exactly the trained layers.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

RANK, ALPHA = 2, 4.0


def _comfy_targets(transformer) -> dict[str, tuple[int, int]]:
    """The modules ComfyUI's Z-Image key map has a place for (its z_image_to_diffusers table), with the
    shape of the part of ComfyUI's weight each one patches (a third of qkv for q, k and v)."""
    dim = transformer.config.dim
    shapes: dict[str, tuple[int, int]] = {}
    stacks = {"layers": True, "noise_refiner": True, "context_refiner": False}
    for stack, has_adaln in stacks.items():
        for i, block in enumerate(getattr(transformer, stack)):
            for part in ("to_q", "to_k", "to_v"):
                shapes[f"{stack}.{i}.attention.{part}"] = (dim, dim)  # offset part of attention.qkv
            for name in ("attention.to_out.0", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"):
                module = block.get_submodule(name)
                shapes[f"{stack}.{i}.{name}"] = (module.out_features, module.in_features)
            if has_adaln:
                module = block.adaLN_modulation[0]
                shapes[f"{stack}.{i}.adaLN_modulation.0"] = (module.out_features, module.in_features)
    return shapes


def test_comfy_names_follow_comfyuis_map_on_the_full_size_transformer() -> None:
    from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_z_image_lora_to_diffusers

    from studio.train.families.zimage_names import comfy_state_dict
    from studio.train.pipelines.zimage import LORA_TARGETS, full_size_transformer

    transformer = full_size_transformer()
    modules = {name: m for name, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)
               and any(name.endswith("." + t) for t in LORA_TARGETS)}
    blocks = len(transformer.layers) + len(transformer.noise_refiner) + len(transformer.context_refiner)
    assert blocks == 34 and len(modules) == 4 * blocks
    generator = torch.Generator().manual_seed(0)
    peft = {}
    for name, m in modules.items():  # rank-2 factors on the CPU: small even for 3840-wide layers
        peft[f"{name}.lora_A.weight"] = torch.randn(RANK, m.in_features, generator=generator)
        peft[f"{name}.lora_B.weight"] = torch.randn(m.out_features, RANK, generator=generator)
    comfy = comfy_state_dict(peft, ALPHA)

    targets = _comfy_targets(transformer)
    written = {re.sub(r"\.(lora_down\.weight|lora_up\.weight|alpha)$", "", k).removeprefix("diffusion_model.")
               for k in comfy}
    assert all(k.startswith("diffusion_model.") for k in comfy)
    assert written == set(name for name in modules), sorted(written ^ set(modules))[:5]
    assert written <= set(targets), sorted(written - set(targets))[:5]
    for key in written:
        up, down = comfy[f"diffusion_model.{key}.lora_up.weight"], comfy[f"diffusion_model.{key}.lora_down.weight"]
        assert (up.shape[0], down.shape[1]) == targets[key], key
        assert float(comfy[f"diffusion_model.{key}.alpha"]) == ALPHA

    back = _convert_non_diffusers_z_image_lora_to_diffusers(dict(comfy))
    assert set(back) == {f"transformer.{k}" for k in peft}
    for name in list(modules)[:8]:
        a, b = peft[f"{name}.lora_A.weight"], peft[f"{name}.lora_B.weight"]
        a2, b2 = back[f"transformer.{name}.lora_A.weight"], back[f"transformer.{name}.lora_B.weight"]
        probe = torch.randn(a.shape[1], 3, generator=generator)
        torch.testing.assert_close(b2 @ (a2 @ probe), (b @ (a @ probe)) * ALPHA / RANK, rtol=1e-4, atol=1e-3)


def test_a_layer_comfyui_has_no_place_for_is_refused_with_what_to_do() -> None:
    from studio.train.errors import TrainError
    from studio.train.families.zimage_names import comfy_state_dict

    bad = {"context_refiner.0.adaLN_modulation.0.lora_A.weight": torch.zeros(2, 4),
           "context_refiner.0.adaLN_modulation.0.lora_B.weight": torch.zeros(4, 2)}
    with pytest.raises(TrainError, match=r"context_refiner\.0\.adaLN_modulation\.0 has no place") as refused:
        comfy_state_dict(bad, 1.0)
    assert "method.target_modules" in refused.value.hint


def test_the_stored_counts_are_the_published_z_image_architecture() -> None:
    """resources/architectures/zimage.json (benchmarks/count_transformer_family.py zimage) against the
    classes built from the published configuration: a 6.15 B transformer of 34 blocks and FLUX's VAE; the
    Qwen3-4B encoder is the one FLUX.2 [klein] 4B counts too."""
    import json
    from pathlib import Path

    from diffusers import AutoencoderKL

    from studio.train.pipelines.zimage import VAE, full_size_transformer

    resources = Path(__file__).resolve().parents[2] / "resources" / "architectures"
    stored = json.loads((resources / "zimage.json").read_text())["components"]
    transformer = full_size_transformer()
    with torch.device("meta"):
        vae = AutoencoderKL(**VAE)
    assert stored["transformer"]["params"] == sum(p.numel() for p in transformer.parameters()) == 6_154_908_736
    assert stored["transformer"]["blocks"] == 34 and stored["transformer"]["lora_targets"]["layers"] == 4 * 34
    assert stored["vae"]["params"] == sum(p.numel() for p in vae.parameters())
    klein = json.loads((resources / "flux2-klein-4b.json").read_text())["components"]
    assert stored["text_encoder"]["params"] == klein["text_encoder"]["params"]
