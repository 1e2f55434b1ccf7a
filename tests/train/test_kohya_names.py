"""The kohya-format LoRA of the full-size SD1.5, SDXL and SD3-medium architectures names every module as
ComfyUI's LoRA loader (comfy/lora.py) and kohya's sd-scripts (networks/lora.py) look them up.

The architectures are built on the meta device (no weights); the rules are written here from those
programs' key maps, over the published checkpoints' weight names (fixtures/hub_keys.json):
- ComfyUI: `lora_unet_` / `lora_transformer_` + a diffusers weight name with "." as "_"; text
  encoders as `lora_te_` (SD1.x) or `lora_te1_`/`lora_te2_` + `text_model_encoder_layers_{n}_{part}`
  for the attention and MLP projections.
  ComfyUI (and Forge) also map `lora_unet_` + an SDXL weight's original (SAI) name.
- sd-scripts: `lora_unet_` + the name of a Linear or Conv2d inside a Transformer2DModel, ResnetBlock2D,
  Downsample2D or Upsample2D of the diffusers UNet (SD1.x), of its SAI-layout UNet for SDXL (the names its
  sdxl_merge_lora.py and --network_weights look up; A1111 finds an SDXL layer by its SAI name too);
  `lora_te*_` + the name of one inside a CLIPAttention or CLIPMLP of the hub's CLIP text model.
"""

from __future__ import annotations

from typing import Any

import pytest
from fixtures.hub_layout import hub_keys
from fixtures.sdxl_names import sai_name

from studio.core.config.schema import MethodSection

torch = pytest.importorskip("torch")

CLIP_PARTS = ("mlp_fc1", "mlp_fc2", "self_attn_k_proj", "self_attn_q_proj", "self_attn_v_proj", "self_attn_out_proj")
TEXT_PREFIXES = {"sd15": {"text_encoder": "lora_te_"},
                 "sdxl": {"text_encoder": "lora_te1_", "text_encoder_2": "lora_te2_"},
                 "sd3": {"text_encoder": "lora_te1_", "text_encoder_2": "lora_te2_"}}
DENOISER_PREFIX = {"sd15": ("unet", "lora_unet_"), "sdxl": ("unet", "lora_unet_"),
                   "sd3": ("transformer", "lora_transformer_")}
# SD1.5: 16 transformer blocks x 2 attentions x 4 projections, 12 text layers x 4. SDXL: 70 blocks x 8,
# 11 + 32 text layers x 4 (the first encoder's last layer feeds nothing SDXL reads). SD3-medium: 24 joint
# blocks x 7 projections and 23 text outputs (the last block's text stream ends before it), 12 + 32 x 4.
MODULE_COUNTS = {"sd15": 128 + 48, "sdxl": 560 + 44 + 128, "sd3": 24 * 7 + 23 + 48 + 128}
SD_SCRIPTS_UNET_BLOCKS = ("Transformer2DModel", "ResnetBlock2D", "Downsample2D", "Upsample2D")


def _kohya_modules(make_config: Any, family: str, **method: Any) -> tuple[set[str], dict[str, torch.nn.Module]]:
    """The module names of the kohya file the studio writes for a full-size `family` LoRA (`method` on top of
    rank 4), and the family's networks."""
    from studio.train.components import Components
    from studio.train.families import adapter_for
    from studio.train.networks.dora import MAGNITUDE
    from studio.train.pipelines.full_size import components
    from studio.train.saving.outputs import _adapter_config, lora_layers

    config = make_config(family, method=MethodSection(kind="lora", rank=4, alpha=4, train_text_encoder=True, **method))
    adapter = adapter_for(config)
    parts = components(family, "meta", t5=False)
    encoders = [parts[name] for name in adapter.text_encoder_names if name in parts]
    built = Components(denoiser=parts[adapter.denoiser_name], vae=parts["vae"], text_encoders=encoders,
                       tokenizers=[], scheduler=None)
    adapter.add_lora(built)
    layers = lora_layers(adapter, built)
    modules = {adapter.denoiser_name: built.denoiser, **dict(zip(adapter.text_encoder_names, encoders, strict=False))}
    configs = {name: _adapter_config(modules[name]) for name in layers}
    for name, layer in layers.items():  # a DoRA layer's dora_scale needs weights: ones stand in, on the meta device
        configs[name]["dora_scales"] = {key.removesuffix(f".{MAGNITUDE}"): torch.ones(value.shape[0], 1)
                                        for key, value in layer.items() if key.endswith(f".{MAGNITUDE}")}
    state = adapter.kohya_layout(layers, configs)
    # The networks as sd-scripts finds them: without the LoRA layers wrapped around their projections.
    return {key.split(".")[0] for key in state}, components(family, "meta", t5=False)


def _comfyui_names(family: str) -> set[str]:
    component, prefix = DENOISER_PREFIX[family]
    modules = [k.removesuffix(".weight") for k in hub_keys(family, component) if k.endswith(".weight")]
    names = {prefix + m.replace(".", "_") for m in modules}
    if family == "sdxl":
        names |= {prefix + sai_name(m).replace(".", "_") for m in modules}
    for encoder, text_prefix in TEXT_PREFIXES[family].items():
        layers = {int(k.split(".")[3]) for k in hub_keys(family, encoder) if k.startswith("text_model.encoder.layers.")}
        names |= {f"{text_prefix}text_model_encoder_layers_{n}_{part}" for n in layers for part in CLIP_PARTS}
    return names


def _sd_scripts_names(root: torch.nn.Module, prefix: str, blocks: tuple[str, ...], clip: bool,
                      sai: bool = False) -> set[str]:
    names = set()
    for name, module in root.named_modules():
        if type(module).__name__ not in blocks:
            continue
        for child_name, child in module.named_modules():
            if isinstance(child, torch.nn.Linear | torch.nn.Conv2d) and child_name:
                path = f"{name}.{child_name}"
                # sd-scripts runs with transformers 4.x, whose CLIPTextModel keeps the hub's text_model level.
                if clip and not path.startswith("text_model."):
                    path = f"text_model.{path}"
                names.add(prefix + (sai_name(path) if sai else path).replace(".", "_"))
    return names


@pytest.mark.parametrize("family", ["sd15", "sdxl", "sd3"])
def test_every_module_has_a_name_comfyui_maps(make_config: Any, family: str) -> None:
    modules, _ = _kohya_modules(make_config, family)
    unknown = sorted(modules - _comfyui_names(family))
    assert unknown == [], unknown[:5]
    # Every component the LoRA trains is in the file, under its own prefix.
    prefixes = {DENOISER_PREFIX[family][1], *TEXT_PREFIXES[family].values()}
    assert {p for p in prefixes if any(m.startswith(p) for m in modules)} == prefixes
    assert len(modules) == MODULE_COUNTS[family]


def test_sd15_modules_are_the_ones_sd_scripts_builds(make_config: Any) -> None:
    modules, parts = _kohya_modules(make_config, "sd15")
    unet_names = _sd_scripts_names(parts["unet"], "lora_unet_", SD_SCRIPTS_UNET_BLOCKS, clip=False)
    text_names = _sd_scripts_names(parts["text_encoder"], "lora_te_", ("CLIPAttention", "CLIPSdpaAttention",
                                                                        "CLIPMLP"), clip=True)
    assert sorted(modules - unet_names - text_names) == []
    # The attention projections of all 16 transformer blocks (2 attentions each) and all 12 text layers.
    assert sum(m.startswith("lora_unet_") for m in modules) == 16 * 2 * 4
    assert sum(m.startswith("lora_te_") for m in modules) == 12 * 4


@pytest.mark.parametrize("family", ["sdxl", "sd3"])
def test_text_encoder_modules_are_the_ones_sd_scripts_builds(make_config: Any, family: str) -> None:
    modules, parts = _kohya_modules(make_config, family)
    for encoder, prefix in TEXT_PREFIXES[family].items():
        built = _sd_scripts_names(parts[encoder], prefix, ("CLIPAttention", "CLIPSdpaAttention", "CLIPMLP"),
                                  clip=True)
        mine = {m for m in modules if m.startswith(prefix)}
        assert mine and sorted(mine - built) == [], encoder


@pytest.mark.parametrize("method", [{"use_dora": True}, {"network": "locon"}], ids=["dora", "locon"])
def test_sdxl_unet_modules_are_the_ones_sd_scripts_builds(make_config: Any, method: dict[str, Any]) -> None:
    modules, parts = _kohya_modules(make_config, "sdxl", **method)
    built = _sd_scripts_names(parts["unet"], "lora_unet_", SD_SCRIPTS_UNET_BLOCKS, clip=False, sai=True)
    unet = {m for m in modules if m.startswith("lora_unet_")}
    assert unet and sorted(unet - built)[:5] == []
    if "network" in method:  # the first upsampler sits beside an attention in SDXL, unlike in SD1.x
        assert "lora_unet_output_blocks_2_2_conv" in unet and len(unet) == 560 + 49
