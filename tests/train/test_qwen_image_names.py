"""The ComfyUI / musubi-tuner file of a Qwen-Image LoRA, checked on the full-size transformer (meta device).

ComfyUI runs Qwen-Image under diffusers' module names and reads `lora_unet_<module, dots as underscores>`
(lora_down / lora_up / alpha) for every model; musubi-tuner writes that layout, and diffusers reads it back
by turning the underscores into dots again. Every key written for the default targets, and for every
other linear layer of a block, must name a module of the real transformer with the module's shape, and
diffusers' reader of that layout must give back exactly the trained layers.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

RANK, ALPHA = 2, 4.0


def _linears(transformer) -> dict[str, torch.nn.Linear]:
    return {name: m for name, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)}


def _factors(modules: dict[str, torch.nn.Linear], generator: torch.Generator) -> dict[str, torch.Tensor]:
    peft = {}
    for name, m in modules.items():  # rank-2 factors on the CPU: small even for 3072-wide layers
        peft[f"{name}.lora_A.weight"] = torch.randn(RANK, m.in_features, generator=generator)
        peft[f"{name}.lora_B.weight"] = torch.randn(m.out_features, RANK, generator=generator)
    return peft


def test_names_follow_the_lora_unet_layout_on_the_full_size_transformer() -> None:
    from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_qwen_lora_to_diffusers

    from studio.train.families.qwen_image_names import comfy_state_dict
    from studio.train.pipelines.qwen_image import LORA_TARGETS, full_size_transformer

    transformer = full_size_transformer()
    linears = _linears(transformer)
    modules = {name: m for name, m in linears.items() if any(name.endswith("." + t) for t in LORA_TARGETS)}
    assert len(transformer.transformer_blocks) == 60 and len(modules) == 4 * 60
    generator = torch.Generator().manual_seed(0)
    peft = _factors(modules, generator)
    comfy = comfy_state_dict(peft, ALPHA)

    assert all(k.startswith("lora_unet_transformer_blocks_") for k in comfy)
    by_flat = {"lora_unet_" + name.replace(".", "_"): name for name in linears}
    written = {re.sub(r"\.(lora_down\.weight|lora_up\.weight|alpha)$", "", k) for k in comfy}
    assert written == {"lora_unet_" + name.replace(".", "_") for name in modules}
    for key in written:  # a module of the real transformer, with its shape
        module = linears[by_flat[key]]
        up, down = comfy[f"{key}.lora_up.weight"], comfy[f"{key}.lora_down.weight"]
        assert (up.shape[0], down.shape[1]) == (module.out_features, module.in_features), key
        assert float(comfy[f"{key}.alpha"]) == ALPHA

    back = _convert_non_diffusers_qwen_lora_to_diffusers(dict(comfy))
    assert set(back) == {f"transformer.{k}" for k in peft}
    for name in list(modules)[:8]:
        a, b = peft[f"{name}.lora_A.weight"], peft[f"{name}.lora_B.weight"]
        a2, b2 = back[f"transformer.{name}.lora_A.weight"], back[f"transformer.{name}.lora_B.weight"]
        probe = torch.randn(a.shape[1], 3, generator=generator)
        torch.testing.assert_close(b2 @ (a2 @ probe), (b @ (a @ probe)) * ALPHA / RANK, rtol=1e-4, atol=1e-3)


def test_every_linear_layer_of_a_block_and_the_global_ones_come_back_under_their_own_names() -> None:
    """A LoRA on any other linear layer (method.target_modules) keeps its name through diffusers' reader."""
    from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_qwen_lora_to_diffusers

    from studio.train.families.qwen_image_names import comfy_knows, comfy_state_dict
    from studio.train.pipelines.qwen_image import full_size_transformer

    linears = _linears(full_size_transformer())
    block = {name: m for name, m in linears.items() if name.startswith("transformer_blocks.7.")}
    others = {name: m for name, m in linears.items() if not name.startswith("transformer_blocks.")}
    assert len(block) == 14 and all(comfy_knows(name) for name in (*block, *others))
    peft = _factors({**block, **others}, torch.Generator().manual_seed(1))
    back = _convert_non_diffusers_qwen_lora_to_diffusers(comfy_state_dict(peft, float(RANK)))
    assert set(back) == {f"transformer.{k}" for k in peft}


def test_a_layer_the_readers_cannot_place_is_refused_with_what_to_do() -> None:
    from studio.train.errors import TrainError
    from studio.train.families.qwen_image_names import comfy_state_dict

    bad = {"transformer_blocks.0.attn.norm_q.lora_A.weight": torch.zeros(2, 4),
           "transformer_blocks.0.attn.norm_q.lora_B.weight": torch.zeros(4, 2)}
    with pytest.raises(TrainError, match=r"transformer_blocks\.0\.attn\.norm_q has no name") as refused:
        comfy_state_dict(bad, 1.0)
    assert "method.target_modules" in refused.value.hint


def test_the_stored_counts_are_the_published_qwen_image_architecture() -> None:
    """resources/architectures/qwen-image.json (benchmarks/count_transformer_family.py qwen-image) against the
    classes built from the published configuration: a 20.43 B transformer of 60 blocks, the 127 M VAE and the
    whole Qwen2.5-VL-7B the pipeline loads (language model, vision tower and LM head)."""
    import json
    from pathlib import Path

    from studio.train.pipelines.qwen_image import parameter_counts

    resources = Path(__file__).resolve().parents[2] / "resources" / "architectures"
    stored = json.loads((resources / "qwen-image.json").read_text())["components"]
    counts = parameter_counts()
    assert stored["transformer"]["params"] == counts["transformer"] == 20_430_401_088
    assert stored["transformer"]["blocks"] == 60 and stored["transformer"]["lora_targets"]["layers"] == 4 * 60
    assert stored["vae"]["params"] == counts["vae"] == 126_892_531
    assert stored["text_encoder"]["params"] == counts["text_encoder"] == 8_292_166_656
