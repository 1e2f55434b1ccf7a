"""The ComfyUI file of a FLUX.2 [klein] LoRA, checked on the full-size 4B and 9B architectures (meta device).

ComfyUI holds a Flux.2 transformer under its original names and reads a LoRA key
`lora_unet_<name, dots as underscores>` for each module; the LoRA written here for every
default target must name such a module with the module's own weight shape, and diffusers'
reader of that layout (`_convert_kohya_flux2_lora_to_diffusers`) must give back exactly
the layers that were trained, with the same product B @ A * alpha / rank.
"""

from __future__ import annotations

import re

import pytest

from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig

torch = pytest.importorskip("torch")

RANK, ALPHA = 2, 4.0


def _original_shapes(transformer) -> dict[str, tuple[int, int]]:
    """ComfyUI's Flux.2 modules (original names) with their weight shapes, built from the diffusers
    modules they hold: fused q/k/v are three projections tall, the rest are one module each."""
    shapes: dict[str, tuple[int, int]] = {}
    for i, block in enumerate(transformer.transformer_blocks):
        attn = block.attn
        shapes[f"double_blocks.{i}.img_attn.qkv"] = (3 * attn.to_q.out_features, attn.to_q.in_features)
        shapes[f"double_blocks.{i}.txt_attn.qkv"] = (3 * attn.add_q_proj.out_features, attn.add_q_proj.in_features)
        for name, module in (("img_attn.proj", attn.to_out[0]), ("txt_attn.proj", attn.to_add_out),
                             ("img_mlp.0", block.ff.linear_in), ("img_mlp.2", block.ff.linear_out),
                             ("txt_mlp.0", block.ff_context.linear_in), ("txt_mlp.2", block.ff_context.linear_out)):
            shapes[f"double_blocks.{i}.{name}"] = (module.out_features, module.in_features)
    for i, block in enumerate(transformer.single_transformer_blocks):
        for name, module in (("linear1", block.attn.to_qkv_mlp_proj), ("linear2", block.attn.to_out)):
            shapes[f"single_blocks.{i}.{name}"] = (module.out_features, module.in_features)
    return shapes


@pytest.mark.parametrize("size", ["4b", "9b"])
def test_comfy_names_follow_comfyuis_rule_on_the_full_size_transformer(size: str) -> None:
    from diffusers.loaders.lora_conversion_utils import _convert_kohya_flux2_lora_to_diffusers

    from studio.train.families.flux2_klein import Flux2KleinAdapter
    from studio.train.families.flux2_klein_names import comfy_state_dict
    from studio.train.pipelines.flux2_klein import full_size_components

    transformer = full_size_components(size)["transformer"]
    adapter = Flux2KleinAdapter(TrainConfig(model=ModelSection(family="flux2-klein", base="x"),
                                            dataset=DatasetSection(concepts=[ConceptSection(path="images")])))
    adapter.single_blocks = len(transformer.single_transformer_blocks)
    targets = adapter.default_lora_targets()
    modules = {name: m for name, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)
               and any(name == t or name.endswith("." + t) for t in targets)}
    assert len(modules) == 4 * len(transformer.transformer_blocks) + 2 * adapter.single_blocks
    generator = torch.Generator().manual_seed(0)
    peft = {}
    for name, m in modules.items():  # rank-2 factors on the CPU: small even for the 9B's widest layers
        peft[f"{name}.lora_A.weight"] = torch.randn(RANK, m.in_features, generator=generator)
        peft[f"{name}.lora_B.weight"] = torch.randn(m.out_features, RANK, generator=generator)
    comfy = comfy_state_dict(peft, ALPHA)

    originals = _original_shapes(transformer)
    by_comfy_key = {"lora_unet_" + name.replace(".", "_"): name for name in originals}
    written = {re.sub(r"\.(lora_down\.weight|lora_up\.weight|alpha)$", "", k) for k in comfy}
    assert written <= set(by_comfy_key), sorted(written - set(by_comfy_key))[:5]
    for key in written:
        up, down = comfy[f"{key}.lora_up.weight"], comfy[f"{key}.lora_down.weight"]
        assert (up.shape[0], down.shape[1]) == originals[by_comfy_key[key]], key

    back = _convert_kohya_flux2_lora_to_diffusers(dict(comfy))
    assert set(back) == {f"transformer.{k}" for k in peft}
    for name in modules:
        a, b = peft[f"{name}.lora_A.weight"], peft[f"{name}.lora_B.weight"]
        a2, b2 = back[f"transformer.{name}.lora_A.weight"], back[f"transformer.{name}.lora_B.weight"]
        # The same update B @ A (diffusers bakes alpha / rank into the factors it returns), compared on
        # probe vectors: the full products of the 9B's widest layers would be 600 MB each.
        probe = torch.randn(a.shape[1], 3, generator=generator)
        torch.testing.assert_close(b2 @ (a2 @ probe), (b @ (a @ probe)) * ALPHA / RANK, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("size", ["4b", "9b"])
def test_the_shipped_architecture_counts_are_the_published_configs(size: str) -> None:
    import json

    from studio.core.resources import resource_path
    from studio.train.pipelines.full_size import parameter_counts

    shipped = json.loads(resource_path("architectures", f"flux2-klein-{size}.json").read_text(encoding="utf-8"))
    assert {name: c["params"] for name, c in shipped["components"].items()} == parameter_counts("flux2-klein", size)
    # Published sizes: a 3.9 B / 9.1 B transformer, Qwen3-4B / Qwen3-8B beside it.
    assert round(shipped["components"]["transformer"]["params"] / 1e9, 1) == {"4b": 3.9, "9b": 9.1}[size]
    assert round(shipped["components"]["text_encoder"]["params"] / 1e9, 1) == {"4b": 4.0, "9b": 8.2}[size]


def test_dora_on_part_of_a_fused_qkv_is_refused_with_what_to_target() -> None:
    """ComfyUI rescales a fused q/k/v layer's every row by its dora_scale; rows of an untrained part would
    need their base weights' norms, so DoRA on to_q alone is refused before a wrong file is written."""
    from studio.train.errors import TrainError
    from studio.train.families.flux2_klein_names import comfy_state_dict

    module = "transformer_blocks.0.attn.to_q"
    layers = {f"{module}.lora_A.weight": torch.zeros(RANK, 8), f"{module}.lora_B.weight": torch.zeros(8, RANK),
              f"{module}.lora_magnitude_vector": torch.ones(8)}
    with pytest.raises(TrainError) as refused:
        comfy_state_dict(layers, ALPHA, {module: torch.ones(8, 1)})
    assert "double_blocks.0.img_attn.qkv" in str(refused.value) and "to_k" in refused.value.hint


@pytest.mark.parametrize(("method", "said"), [
    ({"target_modules": ["to_q", "norm_out.linear"]}, "the LoRA layer norm_out.linear has no name"),
    ({"target_modules": ["to_q"], "use_dora": True}, "DoRA on part of double_blocks.0.img_attn.qkv"),
])
def test_a_lora_the_comfyui_file_cannot_name_is_refused_before_the_first_step(
        method: dict[str, object], said: str, make_config, run_training, events_of, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The kohya-format file is laid out once the LoRA is added: such a run trained to the end and then ended with
    no output at all (the diffusers file neither), its steps lost."""
    from studio.core.config.schema import MethodSection, OutputSection, TrainingSection
    from studio.core.runs.events import Error, RunFinished, Step

    config = make_config("flux2-klein", method=MethodSection(rank=RANK, **method),  # type: ignore[arg-type]
                         training=TrainingSection(batch_size=2, max_steps=3, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers", "kohya"]))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 1 and not [e for e in events if isinstance(e, Step)]
    (error,) = [e for e in events if isinstance(e, Error)]
    assert error.kind == "config" and said in error.message and "kohya" in error.hint
    assert isinstance(events[-1], RunFinished) and events[-1].step == 0

    config.output.formats = ["diffusers"]  # without the kohya file the same LoRA trains
    code, run_dir = run_training(config, tmp_path / "diffusers")
    assert code == 0 and (run_dir / "output" / "pytorch_lora_weights.safetensors").is_file()


def _comfyui_flux2_keys(transformer) -> set[str]:
    """The LoRA module names ComfyUI's key map (comfy/lora.py model_lora_keys_unet) reads for a FLUX.2 model, written
    again from its code: `lora_unet_` + each weight of the model it holds (the original layout, named here from the
    diffusers modules as diffusers' `convert_flux2_transformer_checkpoint_to_diffusers` renames them), and, FLUX.2
    being a Flux model there, `lora_transformer_` + each diffusers name of comfy/utils.py `flux_to_diffusers`."""
    top = {"x_embedder": "img_in", "context_embedder": "txt_in", "proj_out": "final_layer.linear",
           "norm_out.linear": "final_layer.adaLN_modulation.1",
           "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
           "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
           "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
           "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
           "single_stream_modulation.linear": "single_stream_modulation.lin"}
    double = {"attn.to_q": "img_attn.qkv", "attn.to_k": "img_attn.qkv", "attn.to_v": "img_attn.qkv",
              "attn.add_q_proj": "txt_attn.qkv", "attn.add_k_proj": "txt_attn.qkv", "attn.add_v_proj": "txt_attn.qkv",
              "attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj", "ff.linear_in": "img_mlp.0",
              "ff.linear_out": "img_mlp.2", "ff_context.linear_in": "txt_mlp.0", "ff_context.linear_out": "txt_mlp.2"}
    single = {"attn.to_qkv_mlp_proj": "linear1", "attn.to_out": "linear2"}
    originals = set()
    for name, module in transformer.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        match = re.match(r"^(transformer_blocks|single_transformer_blocks)\.(\d+)\.(.+)$", name)
        if match is None:
            originals.add(top[name])
        elif match.group(1) == "transformer_blocks":
            originals.add(f"double_blocks.{match.group(2)}.{double[match.group(3)]}")
        else:
            originals.add(f"single_blocks.{match.group(2)}.{single[match.group(3)]}")
    flux_map = {"proj_out", "x_embedder", "context_embedder", "norm_out.linear", "controlnet_x_embedder",
                *(f"time_text_embed.{e}.linear_{n}" for e in ("timestep_embedder", "text_embedder",
                                                              "guidance_embedder") for n in (1, 2))}
    for i in range(len(transformer.transformer_blocks)):
        flux_map |= {f"transformer_blocks.{i}.{m}" for m in (
            "attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj",
            "attn.to_out.0", "norm1.linear", "norm1_context.linear", "attn.to_add_out", "ff.net.0.proj", "ff.net.2",
            "ff_context.net.0.proj", "ff_context.net.2", "ff.linear_in", "ff.linear_out", "ff_context.linear_in",
            "ff_context.linear_out")}
    for i in range(len(transformer.single_transformer_blocks)):
        flux_map |= {f"single_transformer_blocks.{i}.{m}" for m in (
            "attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp", "norm.linear", "proj_out", "attn.to_qkv_mlp_proj",
            "attn.to_out")}
    return ({"lora_unet_" + name.replace(".", "_") for name in originals}
            | {"lora_transformer_" + name.replace(".", "_") for name in flux_map})


def test_every_linear_layer_of_a_lycoris_file_has_a_place_in_comfyuis_key_map() -> None:
    """A LoHa or LoKr (written whatever output.formats says, for ComfyUI) may target any linear layer
    (method.target_modules). The shared modulation layers were written under their diffusers names
    (`lora_transformer_double_stream_modulation_img_linear`), which ComfyUI's map has no place for: "lora key not
    loaded", and the file applied without them."""
    from studio.train.families.flux2_klein_names import lycoris_module
    from studio.train.pipelines.flux2_klein import full_size_components

    transformer = full_size_components("4b")["transformer"]
    comfyui = _comfyui_flux2_keys(transformer)
    names = {name: lycoris_module(name) for name, module in transformer.named_modules()
             if isinstance(module, torch.nn.Linear)}
    unread = {module: name for module, name in names.items() if name not in comfyui}
    assert not unread, unread
    assert names["double_stream_modulation_img.linear"] == "lora_unet_double_stream_modulation_img_lin"
