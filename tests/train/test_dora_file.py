"""A DoRA LoRA's kohya-format file (SD1.5's `lora_unet_`/`lora_te_` names, Z-Image's `diffusion_model.`
names, FLUX.2 [klein]'s original layout with fused q/k/v) merges in ComfyUI to the weights peft trained.

ComfyUI reads a DoRA layer as `<module>.dora_scale` beside its lora_up/lora_down/alpha (comfy/lora.py)
and merges it with `weight_decompose` (comfy/weight_adapter/base.py). `comfy_merge` below is that
function, written again here from ComfyUI's code (commit 9c0cf36 of comfyanonymous/ComfyUI), with
LoRAAdapter.calculate_weight's alpha (comfy/weight_adapter/lora.py: alpha / lora_down's rank):

    lora_diff *= alpha
    weight_calc = weight + function(lora_diff)  # function: a layer ComfyUI holds transformed (SD3's swap)
    wd_on_output_axis = dora_scale.shape[0] == weight_calc.shape[0]
    if wd_on_output_axis:
        weight_norm = weight.reshape(weight.shape[0], -1).norm(dim=1, keepdim=True)
                            .reshape(weight.shape[0], *[1] * (weight.dim() - 1))
    else:
        weight_norm = weight_calc.transpose(0, 1).reshape(weight_calc.shape[1], -1).norm(dim=1, keepdim=True)
                                 .reshape(weight_calc.shape[1], *[1] * (weight_calc.dim() - 1)).transpose(0, 1)
    weight_norm = weight_norm + torch.finfo(weight.dtype).eps
    weight_calc *= (dora_scale / weight_norm)

The file's merge is compared, layer by layer, with peft's own merge of the trained DoRA layers
(LoraLayer.merge) at alpha != rank, with magnitudes and up weights moved away from their start.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors.torch import load_file

from studio.core.config.schema import MethodSection, OutputSection

torch = pytest.importorskip("torch")

RANK, ALPHA = 4, 12.0


def comfy_merge(weight: torch.Tensor, up: torch.Tensor, down: torch.Tensor, alpha: torch.Tensor,
                dora_scale: torch.Tensor, function: Callable[[torch.Tensor], torch.Tensor] = lambda x: x) -> torch.Tensor:
    """ComfyUI's merge of one DoRA layer at strength 1 (see the module's docstring)."""
    lora_diff = torch.mm(up.flatten(start_dim=1), down.flatten(start_dim=1)).reshape(weight.shape)
    lora_diff = lora_diff * (alpha / down.shape[0])
    weight_calc = weight + function(lora_diff)
    if dora_scale.shape[0] == weight_calc.shape[0]:
        weight_norm = (weight.reshape(weight.shape[0], -1).norm(dim=1, keepdim=True)
                       .reshape(weight.shape[0], *[1] * (weight.dim() - 1)))
    else:
        weight_norm = (weight_calc.transpose(0, 1).reshape(weight_calc.shape[1], -1).norm(dim=1, keepdim=True)
                       .reshape(weight_calc.shape[1], *[1] * (weight_calc.dim() - 1)).transpose(0, 1))
    weight_norm = weight_norm + torch.finfo(weight.dtype).eps
    return weight_calc * (dora_scale / weight_norm)


def _comfy_name(component: str, module: str) -> str:
    """ComfyUI's kohya key of an SD1.5 module: `lora_unet_` + its diffusers name, `lora_te_` + the CLIP name
    with its `text_model.` level (comfy/lora.py model_lora_keys_unet / model_lora_keys_clip)."""
    if component == "unet":
        return "lora_unet_" + module.replace(".", "_")
    full = module if module.startswith("text_model.") else f"text_model.{module}"
    return "lora_te_" + full.replace(".", "_")


def comfy_layers(family: str, weights: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The weights of the model ComfyUI holds, by the file key it reads for each: SD1.5's by kohya name;
    Z-Image's by `diffusion_model.<diffusers name>` (its Lumina2 key map); Qwen-Image's by `lora_unet_` + its
    diffusers name; FLUX.2's by the original
    layout's name, where to_q/to_k/to_v are one fused qkv weight (rows in q, k, v order)."""
    if family == "sd15":
        return {_comfy_name(c, n): w for c, layers in weights.items() for n, w in layers.items()}
    (layers,) = weights.values()
    if family == "zimage":
        return {f"diffusion_model.{n}": w for n, w in layers.items()}
    if family == "sd3":  # ComfyUI's MMDiT map: `lora_transformer_` + the diffusers name
        return {"lora_transformer_" + n.replace(".", "_"): w for n, w in layers.items()}
    if family == "qwen-image":  # ComfyUI's generic kohya map, as musubi-tuner writes it
        return {"lora_unet_" + n.replace(".", "_"): w for n, w in layers.items()}
    from studio.train.families.flux2_klein_names import comfy_key, original_module

    fused: dict[str, dict[int, torch.Tensor]] = {}
    for name, weight in layers.items():
        original, part = original_module(name)
        fused.setdefault(comfy_key(original), {})[part or 0] = weight
    return {key: torch.cat([parts[p] for p in sorted(parts)]) for key, parts in fused.items()}


# The families whose kohya-format file has its own writer, and whether the text encoder trains too.
TEXT_ENCODER = {"sd15": True, "sd3": False, "zimage": False, "flux2-klein": False, "qwen-image": False}


@pytest.fixture(scope="module", params=list(TEXT_ENCODER))
def trained(request, tiny_model, demo_data: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A tiny model with DoRA layers (SD1.5: on the UNet and the text encoder), moved off their start as
    training would move them, and the outputs written from it."""
    from peft.tuners.lora import LoraLayer

    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.train.families import adapter_for
    from studio.train.saving.outputs import _lora_parts

    family = request.param
    folder = tmp_path_factory.mktemp(f"dora-{family}")
    config = TrainConfig(
        model=ModelSection(family=family, base=str(tiny_model(family))),
        method=MethodSection(kind="lora", rank=RANK, alpha=ALPHA, use_dora=True,
                             train_text_encoder=TEXT_ENCODER[family]),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        output=OutputSection(dir=str(folder), name="dora", formats=["diffusers", "kohya"], save_precision="fp32"),
    )
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    adapter.add_lora(components)
    generator = torch.Generator().manual_seed(7)
    modules = {adapter.denoiser_name: components.denoiser}
    if config.method.train_text_encoder:
        modules["text_encoder"] = components.text_encoders[0]
    dora = {component: {name: layer for name, layer in module.named_modules() if isinstance(layer, LoraLayer)}
            for component, module in modules.items()}
    with torch.no_grad():
        for layers in dora.values():
            for layer in layers.values():
                up = layer.lora_B["default"].weight
                up.copy_(0.2 * torch.randn(up.shape, generator=generator))
                magnitude = layer.lora_magnitude_vector["default"].weight
                magnitude.mul_(1 + 0.2 * torch.randn(magnitude.shape, generator=generator))
    written = adapter.save_lora(folder, *_lora_parts(adapter, components), metadata={})
    bases = {c: {n: layer.get_base_layer().weight.detach().clone() for n, layer in layers.items()}
             for c, layers in dora.items()}
    with torch.no_grad():  # peft's own merge: the weights the DoRA layers compute with
        for layers in dora.values():
            for layer in layers.values():
                layer.merge(adapter_names=["default"])
    merged = {c: {n: layer.get_base_layer().weight.detach().clone() for n, layer in layers.items()}
              for c, layers in dora.items()}
    return family, {path.name: path for path in written}, comfy_layers(family, bases), comfy_layers(family, merged)


def test_the_kohya_file_names_each_dora_layer_as_comfyui_reads_it(trained) -> None:  # type: ignore[no-untyped-def]
    _family, files, bases, _merged = trained
    state = load_file(str(files["dora.safetensors"]))
    assert not [k for k in state if "magnitude" in k]
    assert {k.removesuffix(".dora_scale") for k in state if k.endswith(".dora_scale")} == set(bases)
    for key, base in bases.items():
        assert state[f"{key}.dora_scale"].shape == (base.shape[0], 1)  # one per output, as ComfyUI norms
        rank = state[f"{key}.lora_down.weight"].shape[0]  # a fused q/k/v has the parts' ranks together
        assert float(state[f"{key}.alpha"]) / rank == ALPHA / RANK


def test_comfyuis_merge_of_the_file_is_peft_s_merge(trained) -> None:  # type: ignore[no-untyped-def]
    _family, files, bases, merged = trained
    state = load_file(str(files["dora.safetensors"]))
    worst = 0.0
    for key, base in bases.items():
        comfy = comfy_merge(base, state[f"{key}.lora_up.weight"], state[f"{key}.lora_down.weight"],
                            state[f"{key}.alpha"], state[f"{key}.dora_scale"])
        error = float((comfy - merged[key]).norm() / (merged[key] - base).norm())
        worst = max(worst, error)
    assert worst <= 1e-4, f"ComfyUI's merge is off the trained change by {worst:.2e} (relative)"


def test_the_diffusers_file_keeps_pefts_magnitudes(trained) -> None:  # type: ignore[no-untyped-def]
    _family, files, _bases, _merged = trained
    keys = load_file(str(files["pytorch_lora_weights.safetensors"])).keys()
    assert [k for k in keys if k.endswith(".lora_magnitude_vector")] and not [k for k in keys if "dora_scale" in k]


def test_the_dora_scale_of_a_top_level_sd3_layer_is_named_as_its_lora() -> None:
    """ComfyUI reads `<module>.dora_scale` beside the module's lora_up/lora_down (comfy/lora.py load_lora). An SD3
    DoRA on a top-level layer (method.target_modules = [..., "context_embedder", "proj_out"]) had its dora_scale
    written as `transformer_context_embedder.dora_scale`, without the `lora_` its lora_down has: "lora key not
    loaded", and ComfyUI applied that layer as a plain LoRA."""
    from studio.train.families.kohya import kohya_state_dict

    layers, scales = {}, {}
    for module in ("context_embedder", "proj_out", "transformer_blocks.0.attn.to_q"):
        layers[f"{module}.lora_A.weight"] = torch.ones(RANK, 8)
        layers[f"{module}.lora_B.weight"] = torch.ones(8, RANK)
        layers[f"{module}.lora_magnitude_vector"] = torch.ones(8)
        scales[module] = torch.full((8, 1), 2.0)
    state = kohya_state_dict({"transformer": layers}, {"transformer": {"lora_alpha": ALPHA, "dora_scales": scales}})
    modules = {key.split(".")[0] for key in state}
    assert modules == {"lora_transformer_context_embedder", "lora_transformer_proj_out",
                       "lora_transformer_transformer_blocks_0_attn_to_q"}
    for module in modules:  # each module's four keys under one name, as ComfyUI looks them up
        assert {key.split(".", 1)[1] for key in state if key.split(".")[0] == module} == {
            "lora_down.weight", "lora_up.weight", "alpha", "dora_scale"}
        assert torch.equal(state[f"{module}.dora_scale"], torch.full((8, 1), 2.0))


def _swap_scale_shift(weight: torch.Tensor) -> torch.Tensor:
    """comfy/utils.py swap_scale_shift: the two halves of a modulation's rows exchanged."""
    shift, scale = weight.chunk(2, dim=0)
    return torch.cat([scale, shift], dim=0)


def test_an_sd3_dora_on_a_swapped_modulation_merges_in_comfyui_as_peft_trained(tiny_model, demo_data: Path,
                                                                                tmp_path: Path) -> None:
    """ComfyUI holds SD3's final modulation (norm_out.linear) and the last block's text modulation with their shift
    and scale halves swapped, and swaps the LoRA change into place (mmdit_to_diffusers: swap_scale_shift), but
    applies the dora_scale as the file has it, one value per row of its own weight. Written in diffusers' row order,
    each half's scale landed on the other half's rows."""
    from peft.tuners.lora import LoraLayer

    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.train.families import adapter_for
    from studio.train.saving.outputs import _lora_parts

    config = TrainConfig(
        model=ModelSection(family="sd3", base=str(tiny_model("sd3"))),
        method=MethodSection(kind="lora", rank=RANK, alpha=ALPHA, use_dora=True,
                             target_modules=["norm_out.linear", "norm1_context.linear"]),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        output=OutputSection(dir=str(tmp_path), name="dora", formats=["kohya"], save_precision="fp32"),
    )
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    adapter.add_lora(components)
    last = len(components.denoiser.transformer_blocks) - 1
    swapped = {name: layer for name, layer in components.denoiser.named_modules() if isinstance(layer, LoraLayer)
               and name in ("norm_out.linear", f"transformer_blocks.{last}.norm1_context.linear")}
    assert len(swapped) == 2
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for layer in swapped.values():
            layer.lora_B["default"].weight.copy_(0.2 * torch.randn(layer.lora_B["default"].weight.shape,
                                                                   generator=generator))
            magnitude = layer.lora_magnitude_vector["default"].weight
            magnitude.mul_(1 + 0.2 * torch.randn(magnitude.shape, generator=generator))
    (written,) = adapter.save_lora(tmp_path, *_lora_parts(adapter, components), metadata={})
    state = load_file(str(written))
    for name, layer in swapped.items():
        base = layer.get_base_layer().weight.detach().clone()
        with torch.no_grad():
            layer.merge(adapter_names=["default"])
        trained = layer.get_base_layer().weight.detach()
        key = "lora_transformer_" + name.replace(".", "_")
        # ComfyUI's weight is the original layout's: the diffusers rows swapped; so is what it merges to.
        got = comfy_merge(_swap_scale_shift(base), state[f"{key}.lora_up.weight"], state[f"{key}.lora_down.weight"],
                          state[f"{key}.alpha"], state[f"{key}.dora_scale"], _swap_scale_shift)
        torch.testing.assert_close(got, _swap_scale_shift(trained), rtol=1e-4, atol=1e-5)
