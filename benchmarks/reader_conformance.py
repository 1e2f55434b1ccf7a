"""The LoRA files the studio writes, as other programs' own loaders read them: how many of each file's keys
they load, and how far the weight change they apply is from the change the studio's network makes.

    PYTHONPATH=. .venv/bin/python benchmarks/reader_conformance.py \
        --comfyui /path/to/ComfyUI --sd-scripts /path/to/sd-scripts --site /path/to/extra-site-packages \
        [--families sd15 sdxl ...] [--adapters lora locon ...] [--write]
    .venv/bin/python benchmarks/reader_conformance.py --dry-run     # the table of a fixed row set

For each family (tiny random pipelines, `build_tiny_pipeline`) x adapter (lora; locon on SD1.5/SDXL; loha;
lokr; dora = `method.use_dora`) a network of rank 4, alpha 12 (conv rank 2, conv alpha 7) is added as
training adds it, moved off its start (every trained factor random, DoRA magnitudes scaled) and written
with the trainer's own `save_lora` (the kohya/LyCORIS `<name>.safetensors` and the diffusers
`pytorch_lora_weights.safetensors`). The trained change of each layer is peft's merge after the files are
written. Each reader runs in its own process (its own imports, paths) on each file, and the row gives:
keys loaded / keys in the file, trained layers the reader changed / trained layers, and the relative error
max over trained layers of |applied - trained| / |trained| (a layer the reader does not change counts 1.0).

ComfyUI (a checkout with comfy/lora.py and comfy/weight_adapter/; its `--site` needs einops):
  ComfyUI's own code: `comfy.lora.model_lora_keys_unet` and `model_lora_keys_clip` (the key maps, with
  `comfy.utils.unet_to_diffusers` / `mmdit_to_diffusers` / `flux_to_diffusers` / `z_image_to_diffusers`
  inside them), `comfy.lora_convert.convert_lora`, `comfy.lora.load_lora` (which adapter class reads each
  module: `comfy.weight_adapter` LoRAAdapter / LoHaAdapter / LoKrAdapter, DoRA through their
  `weight_decompose`) and `comfy.lora.calculate_weight` (the patched weight), called in the order of
  `comfy.sd.load_lora_for_models`.
  Stand-ins: the model objects. `comfy.model_base` (which imports all of ComfyUI's networks) is replaced by
  empty classes of the same names (BaseModel, SDXL, SD3, Flux, Flux2(Flux), Lumina2, ...) for the
  `isinstance` tests of the key maps; the model's `state_dict()` holds the tiny pipeline's trained layers
  under ComfyUI's names, placed by ComfyUI's own diffusers maps (the SD U-Nets by `unet_to_diffusers`,
  SD3 by `mmdit_to_diffusers`, Z-Image by `z_image_to_diffusers`, q/k/v fused at their offsets), except
  FLUX.2 [klein], whose ComfyUI names (double_blocks/single_blocks, linear1 = fused q/k/v/mlp) come from
  the studio's `flux2_klein_names.original_module` and `MODULATION` (ComfyUI's `flux_to_diffusers` is FLUX.1's),
  and Qwen-Image, whose ComfyUI model (comfy/ldm/qwen_image/model.py) names its layers as diffusers does. SD3's
  `mmdit_to_diffusers` assumes a width of 64 x depth; its q/k/v offsets are scaled to the tiny width.
  The text encoders are `clip_l.transformer.` / `clip_g.transformer.` + the transformers CLIP names.
  `ModelPatcher.add_patches` (4 lines: a patch of a key the model has, with its offset) is written here.

sd-scripts (a checkout) and LyCORIS (the `lycoris-lora` package in `--site`; sd-scripts reads LoHa/LoKr
through it, `--network_module lycoris.kohya`):
  sd-scripts' own code: `networks/lora.py` `create_network_from_weights` (which modules it builds from the
  file, SDXL's diffusers-to-SAI key conversion) and `LoRANetwork.merge_to` (the change it adds to each
  weight), for the LoRA/LoCon/DoRA files. LyCORIS' own code, on every kohya file:
  `lycoris.kohya.create_network_from_weights`, then either its `merge_to` (the "lycoris (merge_to)" rows)
  or its `apply_to` (the "lycoris (apply_to)" rows: the patched forward, as inference without merging runs;
  the change is read back from the layer's output: a Linear's on the identity, a Conv2d's on impulses).
  Stand-ins: the U-Net objects. SD1.5: the tiny diffusers U-Net's block layers under their own names
  (sd-scripts' original_unet has the same module and class names) in blocks named as below. SDXL: an `SdxlUNet2DConditionModel` made without its __init__ whose
  modules are the tiny diffusers U-Net's layers under their SAI names (input_blocks.4.1.proj_in ...),
  placed by sd-scripts' own `sdxl_model_util.convert_diffusers_unet_state_dict_to_sdxl`, inside blocks named
  ResnetBlock2D / Transformer2DModel / Downsample2D / Upsample2D as sd-scripts' SDXL U-Net names them.
  That map is SDXL's (3 levels of 2 layers; the tiny U-Net has 2 of 1), and lora.py renames the file's
  diffusers names by the same map, so the lora.py rows check the renaming as a full-size SDXL has it. LyCORIS
  renames nothing: its SDXL stand-in holds the tiny U-Net's own SAI names, by ComfyUI's `unet_to_diffusers`
  over the tiny config (the layout the LoHa/LoKr files are written in).
  The text encoders are transformers' CLIP models (as sd-scripts loads them), under a `text_model` level as
  transformers 4 (which sd-scripts pins) names them; transformers 5 dropped it. sd-scripts reads SD1.5 and
  SDXL files only; it is not run for sd3 / flux2-klein / zimage / qwen-image (its other networks read other formats).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("sd15", "sdxl", "sd3", "flux2-klein", "zimage", "qwen-image")
ADAPTERS = ("lora", "locon", "loha", "lokr", "dora")
CONV_FAMILIES = ("sd15", "sdxl")
RANK, ALPHA, CONV_RANK, CONV_ALPHA = 4, 12.0, 2, 7.0
NAME = "bench"
DIFFUSERS_FILE = "pytorch_lora_weights.safetensors"
TOLERANCE = 1e-4
JSON_OUT = ROOT / "resources" / "architectures" / "reader_conformance.json"
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "Outputs as the readers load them"

# A fixed row set: what --dry-run formats (and the test checks), no checkout needed.
SAMPLE_ROWS: list[dict[str, Any]] = [
    {"reader": "comfyui", "family": "sd15", "adapter": "lora", "file": "bench.safetensors", "keys_loaded": 99,
     "keys_total": 99, "layers_applied": 33, "layers_trained": 33, "rel_error": 3.1e-07, "note": ""},
    {"reader": "comfyui", "family": "sd15", "adapter": "lora", "file": DIFFUSERS_FILE, "keys_loaded": 40,
     "keys_total": 66, "layers_applied": 20, "layers_trained": 33, "rel_error": 1.0, "note": "13 layers unchanged"},
    {"reader": "sd-scripts", "family": "sdxl", "adapter": "dora", "file": "bench.safetensors", "keys_loaded": 0,
     "keys_total": 0, "layers_applied": 0, "layers_trained": 0, "rel_error": None,
     "note": "error: ModuleNotFoundError: library"},
]


# ---------------------------------------------------------------------------------------------- the files


def adapters_of(family: str) -> list[str]:
    return [a for a in ADAPTERS if a != "locon" or family in CONV_FAMILIES]


def make_case(family: str, adapter_name: str, base: Path, data: Path, folder: Path) -> dict[str, Any]:
    """Write the studio's files of a tiny network moved off its start into `folder`, and the trained change
    of each layer (`expected.safetensors`: `before/<component>.<module>`, `delta/<component>.<module>`)."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer
    from safetensors.torch import save_file

    from studio.core.config.schema import (
        ConceptSection,
        DatasetSection,
        MethodSection,
        ModelSection,
        OutputSection,
        TrainConfig,
    )
    from studio.core.families.registry import family as family_spec
    from studio.train.families import adapter_for
    from studio.train.saving.outputs import _lora_parts

    network = "lora" if adapter_name == "dora" else adapter_name
    conv = {"conv_rank": CONV_RANK, "conv_alpha": CONV_ALPHA} \
        if family in CONV_FAMILIES and network != "lora" else {}
    config = TrainConfig(
        model=ModelSection(family=family, base=str(base)),
        method=MethodSection(kind="lora", network=network, rank=RANK, alpha=ALPHA, use_dora=adapter_name == "dora",
                             train_text_encoder=family_spec(family).trains_text_encoders, **conv),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=64, buckets=False),
        output=OutputSection(dir=str(folder), name=NAME, formats=["diffusers", "kohya"], save_precision="fp32"),
    )
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    adapter.add_lora(components)
    trained = {adapter.denoiser_name: components.denoiser}
    if config.method.train_text_encoder:
        trained.update(zip(adapter.text_encoder_names, adapter.trainable_encoders(components), strict=False))
    generator = torch.Generator().manual_seed(5)
    layers: dict[str, Any] = {}
    with torch.no_grad():
        for component, module in trained.items():
            for name, layer in module.named_modules():
                if isinstance(layer, BaseTunerLayer):
                    for pname, parameter in layer.named_parameters():
                        if not parameter.requires_grad:
                            continue
                        if "magnitude" in pname:
                            parameter.mul_(1 + 0.2 * torch.rand(parameter.shape, generator=generator))
                        else:
                            parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
                    layers[f"{component}.{name}"] = layer
    written = adapter.save_lora(folder, *_lora_parts(adapter, components), metadata={})
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, layer in layers.items():
            before = layer.get_base_layer().weight.detach().clone()
            layer.merge()
            out[f"before/{name}"] = before.contiguous()
            out[f"delta/{name}"] = (layer.get_base_layer().weight.detach() - before).contiguous()
    save_file(out, str(folder / "expected.safetensors"))
    case = {"family": family, "adapter": adapter_name, "folder": str(folder), "base": str(base),
            "denoiser": adapter.denoiser_name, "components": list(trained),
            "files": [p.name for p in written if p.suffix == ".safetensors"]}
    (folder / "case.json").write_text(json.dumps(case, indent=1))
    return case


# ------------------------------------------------------------------------------------------ shared helpers


def _expected(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    from safetensors.torch import load_file

    state = load_file(str(Path(case["folder"]) / "expected.safetensors"))
    before = {k[len("before/"):]: v for k, v in state.items() if k.startswith("before/")}
    delta = {k[len("delta/"):]: v for k, v in state.items() if k.startswith("delta/")}
    return before, delta


def _score(applied: dict[str, Any], delta: dict[str, Any]) -> tuple[int, float]:
    """(layers changed, max relative error; a trained layer left unchanged counts 1.0)."""
    worst, changed = 0.0, 0
    for name, expected in delta.items():
        got = applied.get(name)
        if got is None or float(got.abs().max()) == 0.0:
            worst = max(worst, 1.0)
            continue
        changed += 1
        worst = max(worst, float((got.reshape(expected.shape) - expected).norm() / expected.norm()))
    return changed, worst


# ------------------------------------------------------------------------------------------------ ComfyUI

_MODEL_BASE = ("BaseModel", "SDXL", "SDXLRefiner", "StableCascade_C", "SD3", "AuraFlow", "PixArt", "HunyuanDiT",
               "Flux", "GenmoMochi", "HunyuanVideo", "HiDream", "ACEStep", "Omnigen2", "QwenImage", "Lumina2",
               "Kandinsky5")
_CLIP = {"text_encoder": "clip_l", "text_encoder_2": "clip_g"}


def _import_comfy(checkout: Path) -> Any:
    import types

    sys.path.insert(0, str(checkout))
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.options

    comfy.options.enable_args_parsing()
    stub = types.ModuleType("comfy.model_base")
    for name in _MODEL_BASE:
        setattr(stub, name, type(name, (), {}))
    stub.Flux2 = type("Flux2", (stub.Flux,), {})
    sys.modules["comfy.model_base"] = stub
    comfy.model_base = stub
    import comfy.lora
    import comfy.lora_convert
    import comfy.utils

    return comfy


def _unet_config(unet: dict[str, Any]) -> dict[str, Any]:
    """The SGM U-Net config ComfyUI detects for a diffusers U-Net config (what unet_to_diffusers reads)."""
    blocks = len(unet["down_block_types"])
    per_block = unet["layers_per_block"]
    per_block = [per_block] * blocks if isinstance(per_block, int) else list(per_block)
    layers = unet.get("transformer_layers_per_block", 1)
    layers = [layers] * blocks if isinstance(layers, int) else list(layers)
    depth, depth_out = [], []
    for i, kind in enumerate(unet["down_block_types"]):
        depth += [layers[i] if "CrossAttn" in kind else 0] * per_block[i]
        depth_out += [layers[i] if "CrossAttn" in kind else 0] * (per_block[i] + 1)
    return {"num_res_blocks": per_block, "channel_mult": [1] * blocks, "transformer_depth": depth,
            "transformer_depth_output": depth_out, "transformer_depth_middle": layers[-1]}


def _comfy_places(comfy: Any, family: str, base: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(model class, unet_config, diffusers denoiser weight name -> ComfyUI key or (key, (dim, offset, size)))."""
    if family in ("sd15", "sdxl"):
        config = _unet_config(json.loads((base / "unet" / "config.json").read_text()))
        places = {k: f"diffusion_model.{v}" for k, v in comfy.utils.unet_to_diffusers(config).items()}
        return ("SDXL" if family == "sdxl" else "BaseModel"), config, places
    transformer = json.loads((base / "transformer" / "config.json").read_text())
    if family == "sd3":
        hidden = transformer["num_attention_heads"] * transformer["attention_head_dim"]
        config = {"depth": transformer["num_layers"]}
        original = getattr(comfy.utils, "unscaled_mmdit_to_diffusers", comfy.utils.mmdit_to_diffusers)
        comfy.utils.unscaled_mmdit_to_diffusers = original
        scale = hidden / (64 * config["depth"])

        def scaled(cfg: dict[str, Any], output_prefix: str = "") -> dict[str, Any]:
            out = original(cfg, output_prefix=output_prefix)
            return {k: (v[0], tuple(int(x * scale) if i else x for i, x in enumerate(v[1])), *v[2:])
                    if isinstance(v, tuple) and v[1] is not None else v for k, v in out.items()}

        comfy.utils.mmdit_to_diffusers = scaled
        return "SD3", config, scaled(config, output_prefix="diffusion_model.")
    if family == "zimage":
        config = {"n_layers": transformer["n_layers"], "dim": transformer["dim"],
                  "n_refiner_layers": transformer.get("n_refiner_layers", 2)}
        return "Lumina2", config, comfy.utils.z_image_to_diffusers(config, output_prefix="diffusion_model.")
    if family == "flux2-klein":
        from studio.train.families.flux2_klein_names import MODULATION, original_module

        hidden = transformer["num_attention_heads"] * transformer["attention_head_dim"]
        config = {"depth": transformer["num_layers"], "depth_single_blocks": transformer["num_single_layers"],
                  "hidden_size": hidden}
        places: dict[str, Any] = {}
        from diffusers import Flux2Transformer2DModel

        model = Flux2Transformer2DModel.from_config(Flux2Transformer2DModel.load_config(base / "transformer"))
        for name, layer in model.named_modules():
            if not hasattr(layer, "weight") or layer.weight is None:
                continue
            if name in MODULATION:  # a shared modulation layer: `lin` in the original layout
                places[f"{name}.weight"] = f"diffusion_model.{MODULATION[name]}.weight"
                continue
            try:
                original, part = original_module(name)
            except Exception:
                continue
            key = f"diffusion_model.{original}.weight"
            places[f"{name}.weight"] = key if part is None else (key, (0, part * hidden, hidden))
        return "Flux2", config, places
    if family == "qwen-image":  # ComfyUI's QwenImage holds the transformer under diffusers' own module names
        import torch
        from diffusers import QwenImageTransformer2DModel

        model = QwenImageTransformer2DModel.from_config(QwenImageTransformer2DModel.load_config(base / "transformer"))
        return "QwenImage", {}, {f"{name}.weight": f"diffusion_model.{name}.weight"
                                 for name, layer in model.named_modules() if isinstance(layer, torch.nn.Linear)}
    raise ValueError(family)


def read_comfyui(case: dict[str, Any], file: str, checkout: Path) -> dict[str, Any]:
    import logging

    import torch

    comfy = _import_comfy(checkout)
    family, base = case["family"], Path(case["base"])
    before, delta = _expected(case)
    kind, unet_config, places = _comfy_places(comfy, family, base)
    # (key, None, function): a whole weight stored transformed (SD3's final modulation); compared as is.
    places = {k: v[0] if isinstance(v, tuple) and v[1] is None else v for k, v in places.items()}
    # The stand-in models' state dicts: each trained layer at its ComfyUI place (fused q/k/v: zeros elsewhere).
    state: dict[str, torch.Tensor] = {}
    clip_state: dict[str, torch.Tensor] = {}
    where: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for target in places.values():
        if isinstance(target, tuple):
            sizes[target[0]] = max(sizes.get(target[0], 0), target[1][1] + target[1][2])
    for name, weight in before.items():
        component, _, module = name.partition(".")
        if component == case["denoiser"]:
            target = places.get(f"{module}.weight")
            if target is None:
                continue
            where[name] = target
            if isinstance(target, tuple):
                key, (dim, offset, size) = target
                if key not in state:
                    state[key] = torch.zeros((sizes[key], *weight.shape[1:]), dtype=weight.dtype)
                state[key].narrow(dim, offset, size).copy_(weight)
            else:
                state[target] = weight.clone()
        else:
            # The trained encoder is the CLIP text model's inner one: its names keep the `text_model.` level.
            module = module if module.startswith("text_model.") else f"text_model.{module}"
            key = f"{_CLIP[component]}.transformer.{module}.weight"
            where[name] = key
            clip_state[key] = weight.clone()

    class Holder:
        def __init__(self, sd: dict[str, Any]) -> None:
            self.sd = sd

        def state_dict(self) -> dict[str, Any]:
            return self.sd

    model = getattr(comfy.model_base, kind)()
    model.state_dict = lambda: state  # type: ignore[attr-defined]
    model.model_config = type("Config", (), {"unet_config": unet_config})()
    key_map: dict[str, Any] = {}
    key_map = comfy.lora.model_lora_keys_unet(model, key_map)
    key_map = comfy.lora.model_lora_keys_clip(Holder(clip_state), key_map)
    lora = comfy.utils.load_torch_file(str(Path(case["folder"]) / file), safe_load=True)
    total = len(lora)
    missing: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("lora key not loaded:"):
                missing.append(message.split(":", 1)[1].strip())

    logging.getLogger().addHandler(Catch())
    lora = comfy.lora_convert.convert_lora(lora)
    loaded = comfy.lora.load_lora(lora, key_map)
    # ModelPatcher.add_patches: a patch of a key the model has, at its offset.
    everything = {**state, **clip_state}
    patches: dict[str, list[Any]] = {}
    for k, patch in loaded.items():
        key, offset, function = (k, None, None) if isinstance(k, str) else (k[0], k[1], k[2] if len(k) > 2 else None)
        if key in everything:
            patches.setdefault(key, []).append((1.0, patch, 1.0, offset, function))
    changed = {}
    for key, key_patches in patches.items():
        weight = everything[key].to(torch.float32).clone()
        changed[key] = comfy.lora.calculate_weight(key_patches, weight.clone(), key) - weight
    applied = {}
    for name, target in where.items():
        if isinstance(target, tuple):
            key, (dim, offset, size) = target
            if key in changed:
                applied[name] = changed[key].narrow(dim, offset, size)
        elif target in changed:
            applied[name] = changed[target]
    layers, error = _score(applied, delta)
    notes = []
    if missing:
        notes.append(f"not loaded e.g. {missing[0]}")
    unplaced = [n for n in delta if n not in where]
    if unplaced:
        notes.append(f"{len(unplaced)} trained layers have no ComfyUI place, e.g. {unplaced[0]}")
    return {"keys_loaded": total - len(missing), "keys_total": total, "layers_applied": layers,
            "layers_trained": len(delta), "rel_error": error, "note": "; ".join(notes)}


# --------------------------------------------------------------------------------------------- sd-scripts


def _tiny_sai_names(unet: Any) -> dict[str, str]:
    """diffusers -> SAI weight names of the tiny U-Net's own layout, by ComfyUI's `unet_to_diffusers` (from the
    ComfyUI checkout in READER_SGM_FROM): sd-scripts' map is SDXL's (3 levels of 2 layers; the tiny has 2 of 1)."""
    comfy = _import_comfy(Path(os.environ["READER_SGM_FROM"]))
    return comfy.utils.unet_to_diffusers(_unet_config(dict(unet.config)))


def _unet_standin(unet: Any, sdxl: bool, own_layout: bool = False) -> Any:
    """The U-Net's block layers as sd-scripts' U-Net holds them: SDXL, an SdxlUNet2DConditionModel whose
    modules are `unet`'s layers under their SAI names; SD1.5, under their own (diffusers) names; in blocks of
    the class names sd-scripts' U-Nets have."""
    import torch
    from library.sdxl_model_util import convert_diffusers_unet_state_dict_to_sdxl
    from library.sdxl_original_unet import SdxlUNet2DConditionModel

    tiny = _tiny_sai_names(unet) if own_layout else None

    def to_sai(weight: str) -> str | None:
        if tiny is not None:
            return tiny.get(weight)
        try:
            return next(iter(convert_diffusers_unet_state_dict_to_sdxl({weight: None})))
        except AssertionError:  # no place in the SAI U-Net
            return None

    kinds = {"resnets": "ResnetBlock2D", "attentions": "Transformer2DModel", "downsamplers": "Downsample2D",
             "upsamplers": "Upsample2D"}
    root_class = SdxlUNet2DConditionModel if sdxl else type("UNet2DConditionModel", (torch.nn.Module,), {})
    root = root_class.__new__(root_class)
    torch.nn.Module.__init__(root)
    classes: dict[str, type] = {}

    def container(path: list[str], leaf_class: str | None) -> torch.nn.Module:
        node = root
        for i, part in enumerate(path):
            if part not in node._modules:
                cls = torch.nn.Module
                if leaf_class and i == len(path) - 1:
                    cls = classes.setdefault(leaf_class, type(leaf_class, (torch.nn.Module,), {}))
                node.add_module(part, cls())
            node = node._modules[part]
        return node

    for name, layer in unet.named_modules():
        if not isinstance(layer, torch.nn.Linear | torch.nn.Conv2d):
            continue
        kind = next((kinds[p] for p in name.split(".") if p in kinds), None)
        sai = to_sai(f"{name}.weight") if sdxl else f"{name}.weight"
        if kind is None or sai is None:
            continue
        parts = sai[: -len(".weight")].split(".")
        # The block: input_blocks.4.1 / middle_block.1 (SAI), down_blocks.0.attentions.1 / mid_block.resnets.0.
        depth = {"middle_block": 2, "mid_block": 3}.get(parts[0], 3 if sdxl else 4)
        block, child = parts[:depth], parts[depth:]
        holder = container(block, kind)
        for part in child[:-1]:
            if part not in holder._modules:
                holder.add_module(part, torch.nn.Module())
            holder = holder._modules[part]
        holder.add_module(child[-1], layer)
    return root


def _stub_missing(*names: str) -> None:
    """Empty modules for what sd-scripts' library/utils.py imports for its image functions (torchvision, cv2),
    which the LoRA loaders do not call, where they are not installed."""
    import importlib.util
    import types

    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            sys.modules[name] = types.ModuleType(name)
    if "torchvision" in sys.modules and "torchvision.transforms" in sys.modules:
        sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]  # type: ignore[attr-defined]


def read_lycoris(case: dict[str, Any], file: str, checkout: Path) -> dict[str, Any]:
    return read_sd_scripts(case, file, checkout, lycoris=True)


def read_lycoris_forward(case: dict[str, Any], file: str, checkout: Path) -> dict[str, Any]:
    return read_sd_scripts(case, file, checkout, lycoris=True, forward=True)


def _forward_change(layer: Any, before: Any) -> Any:
    """The weight change a patched layer's forward applies: a Linear's from the identity; a Conv2d's from
    one impulse per input channel and kernel place, read at an output place whose window holds them."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        if isinstance(layer, torch.nn.Linear):
            eye = torch.eye(layer.in_features)
            return (layer(eye) - F.linear(eye, before, layer.bias)).T
        # Output place 1 reads the input window from stride - padding: the impulses sit there.
        out_c, in_c, kh, kw = before.shape
        (sh, sw), (ph, pw) = layer.stride, layer.padding
        impulses = torch.zeros(in_c * kh * kw, in_c, sh - ph + kh, sw - pw + kw)
        impulses[:, :, sh - ph:, sw - pw:] = torch.eye(in_c * kh * kw).reshape(in_c * kh * kw, in_c, kh, kw)
        base = F.conv2d(impulses, before, layer.bias, layer.stride, layer.padding, layer.dilation, layer.groups)
        got = (layer(impulses) - base)[:, :, 1, 1]
        return got.reshape(in_c, kh, kw, out_c).permute(3, 0, 1, 2)


def read_sd_scripts(case: dict[str, Any], file: str, checkout: Path, lycoris: bool | None = None,
                    forward: bool = False) -> dict[str, Any]:
    import torch
    from diffusers import UNet2DConditionModel
    from safetensors.torch import load_file
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    _stub_missing("torchvision", "torchvision.transforms", "cv2")
    sys.path.insert(0, str(checkout))
    family, base = case["family"], Path(case["base"])
    before, delta = _expected(case)
    unet = UNet2DConditionModel.from_pretrained(base / "unet")
    encoders = {"text_encoder": CLIPTextModel.from_pretrained(base / "text_encoder")}
    if family == "sdxl":
        encoders["text_encoder_2"] = CLIPTextModelWithProjection.from_pretrained(base / "text_encoder_2")
    modules = {"unet": unet, **encoders}
    with torch.no_grad():  # the base as the studio's network saw it
        for name, weight in before.items():
            component, _, module = name.partition(".")
            modules[component].get_submodule(module).weight.copy_(weight)
    # LyCORIS renames nothing: its SDXL stand-in holds the tiny U-Net's own SAI names (as the LoHa/LoKr files
    # write them); sd-scripts' lora.py renames the file's diffusers names by its SDXL map, so its stand-in uses it.
    root = _unet_standin(unet, family == "sdxl", own_layout=lycoris and "READER_SGM_FROM" in os.environ)
    # transformers 5's CLIP models lost the `text_model` level that transformers 4 (which sd-scripts pins) has:
    # the readers see them under it again.
    wrapped = []
    for encoder in encoders.values():
        holder = torch.nn.Module()
        holder.text_model = encoder if not hasattr(encoder, "text_model") else encoder.text_model
        wrapped.append(holder)
    text = wrapped if family == "sdxl" else wrapped[0]
    path = Path(case["folder"]) / file
    weights = load_file(str(path))
    total = len(weights)
    lycoris = bool(lycoris)
    if lycoris:
        from lycoris.kohya import create_network_from_weights
    else:
        from networks.lora import create_network_from_weights
    network, weights_sd = create_network_from_weights(1.0, str(path), None, text, root, weights_sd=dict(weights),
                                                      for_inference=True)
    if lycoris and forward:
        network.apply_to(text, root, apply_text_encoder=True, apply_unet=True)
        names = {lora.lora_name for lora in network.text_encoder_loras + network.unet_loras}
    elif lycoris:
        network.merge_to(text, root, weights_sd, torch.float32, "cpu")
        names = {lora.lora_name for lora in network.loras}
    else:
        names = {lora.lora_name for lora in network.unet_loras + network.text_encoder_loras}
        network.merge_to(text, root, weights_sd, torch.float32, "cpu")
    read = {"lora_up.weight", "lora_down.weight", "alpha"} if not lycoris else None
    loaded = 0
    for key in weights_sd:  # as the loader holds them (sd-scripts renames SDXL's diffusers U-Net keys to SAI)
        module, _, rest = key.partition(".")
        if module in names and (read is None or rest in read):
            loaded += 1
    applied = {}
    with torch.no_grad():
        for name, weight in before.items():
            component, _, module = name.partition(".")
            layer = modules[component].get_submodule(module)
            applied[name] = _forward_change(layer, weight) if forward else layer.weight.detach() - weight
    layers, error = _score(applied, delta)
    skipped = sorted({k.partition(".")[2] for k in weights_sd if k.partition(".")[0] in names} - read) if read else []
    note = f"reads no {', '.join(skipped)}" if skipped else ""
    return {"keys_loaded": loaded, "keys_total": total, "layers_applied": layers, "layers_trained": len(delta),
            "rel_error": error, "note": note}


READERS = {"comfyui": read_comfyui, "sd-scripts": read_sd_scripts, "lycoris (merge_to)": read_lycoris,
           "lycoris (apply_to)": read_lycoris_forward}


def reader_files(reader: str, case: dict[str, Any]) -> list[str]:
    kohya = f"{NAME}.safetensors"
    if reader == "sd-scripts" and case["adapter"] in ("loha", "lokr"):
        return []  # sd-scripts reads them through lycoris.kohya: the lycoris rows
    if reader != "comfyui":
        return [kohya] if case["family"] in CONV_FAMILIES and kohya in case["files"] else []
    return [f for f in (kohya, DIFFUSERS_FILE) if f in case["files"]]


# ------------------------------------------------------------------------------------------------- output


def _error(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}"


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown tables, one per reader."""
    out: list[str] = []
    for reader in dict.fromkeys(r["reader"] for r in rows):
        out += [f"**{reader}**", "",
                "| family | adapter | file | keys loaded / total | layers changed / trained | rel. error | note |",
                "|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["reader"] == reader):
            flag = " ⚠" if r["rel_error"] is None or r["rel_error"] > TOLERANCE \
                or r["keys_loaded"] < r["keys_total"] else ""
            out.append(f"| {r['family']} | {r['adapter']} | {r['file']} | {r['keys_loaded']} / {r['keys_total']} "
                       f"| {r['layers_applied']} / {r['layers_trained']} | {_error(r['rel_error'])}{flag} "
                       f"| {r['note'].replace('|', '/')} |")
        out.append("")
    return "\n".join(out)


def section(rows: list[dict[str, Any]], commits: dict[str, str], date: str) -> str:
    import textwrap

    intro = ("`benchmarks/reader_conformance.py`: each LoRA file the studio writes (tiny random pipelines, rank 4, "
             "alpha 12; convolutions rank 2, alpha 7), read by the other program's own loader; the change it "
             "applies to each trained layer against the change the studio's network makes (peft's merge). "
             "Relative error: max over trained layers of ‖applied − trained‖ / ‖trained‖; a trained layer the "
             "reader leaves unchanged counts 1.0. ⚠: not every key loaded, or off by more than 1e-4. "
             "Which parts are the readers' own code and which are stand-ins (the model objects) is in the "
             "script's docstring.")
    checkouts = "Checkouts: " + "; ".join(f"{k} `{v}`" for k, v in commits.items()) + "."
    lines = [f"## {SECTION} ({date})", "", textwrap.fill(intro, 110), "", textwrap.fill(checkouts, 110), "",
             table(rows)]
    return "\n".join(lines)


def write_outputs(rows: list[dict[str, Any]], commits: dict[str, str]) -> None:
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    JSON_OUT.write_text(json.dumps({"date": date, "commits": commits, "rank": RANK, "alpha": ALPHA,
                                    "conv_rank": CONV_RANK, "conv_alpha": CONV_ALPHA, "rows": rows}, indent=1) + "\n")
    text = DOCS.read_text()
    start = text.find(f"## {SECTION}")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + text[end + 1:] if end >= 0 else text[:start]
    DOCS.write_text(text.rstrip("\n") + "\n\n" + section(rows, commits, date) + "\n")


def _commit(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else (checkout / ".commit").read_text().strip() \
        if (checkout / ".commit").is_file() else "unknown"


def _lycoris_version(sites: list[str]) -> str:
    for site in sites:
        for info in Path(site).glob("lycoris_lora-*.dist-info"):
            return info.name[len("lycoris_lora-"):-len(".dist-info")]
    return "not found"


# ------------------------------------------------------------------------------------------------- driver


def _child(args: argparse.Namespace) -> None:
    if args.site:
        sys.path[1:1] = args.site
    case = json.loads(Path(args.case).read_text())
    rows = []
    for file in args.file:
        try:
            row = READERS[args.reader](case, file, Path(args.checkout))
        except Exception as exc:
            import traceback

            traceback.print_exc()
            row = {"keys_loaded": 0, "keys_total": 0, "layers_applied": 0, "layers_trained": 0, "rel_error": None,
                   "note": f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
        rows.append({"reader": args.reader, "family": case["family"], "adapter": case["adapter"], "file": file, **row})
    print("ROWS " + json.dumps(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comfyui", type=Path, help="a ComfyUI checkout (comfy/lora.py, comfy/weight_adapter/)")
    parser.add_argument("--sd-scripts", type=Path, help="a kohya-ss sd-scripts checkout")
    parser.add_argument("--site", action="append", default=[], help="extra import folder for the readers "
                        "(einops for ComfyUI, lycoris-lora for sd-scripts' LoHa/LoKr)")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--adapters", nargs="+", default=list(ADAPTERS), choices=ADAPTERS)
    parser.add_argument("--work", type=Path, help="folder for the models and files (default: a temporary one)")
    parser.add_argument("--write", action="store_true", help="write the JSON rows and the docs/benchmarks.md section")
    parser.add_argument("--dry-run", action="store_true", help="print the table of a fixed row set and stop")
    parser.add_argument("--reader", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--checkout", help=argparse.SUPPRESS)
    parser.add_argument("--file", action="append", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reader:
        _child(args)
        return 0
    if args.dry_run:
        print(table(SAMPLE_ROWS))
        return 0
    checkouts = {name: path for name, path in (("comfyui", args.comfyui), ("sd-scripts", args.sd_scripts),
                                               ("lycoris (merge_to)", args.sd_scripts),
                                               ("lycoris (apply_to)", args.sd_scripts)) if path}
    if not checkouts:
        parser.error("give --comfyui and/or --sd-scripts (or --dry-run)")
    work = args.work or Path(tempfile.mkdtemp(prefix="reader-conformance-"))
    from studio.core.dataset.demo_shapes import write_demo_dataset
    from studio.train.pipelines.tiny import build_tiny_pipeline

    data = work / "shapes"
    if not data.is_dir():
        write_demo_dataset(data, count=8, size=64, seed=0)
    rows: list[dict[str, Any]] = []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    if args.comfyui:
        env["READER_SGM_FROM"] = str(args.comfyui)
    for family in args.families:
        base = work / "models" / family
        if not (base / "model_index.json").is_file():
            build_tiny_pipeline(family, base)
        for adapter in (a for a in adapters_of(family) if a in args.adapters):
            folder = work / "cases" / f"{family}-{adapter}"
            folder.mkdir(parents=True, exist_ok=True)
            case_file = folder / "case.json"
            case = json.loads(case_file.read_text()) if case_file.is_file() else \
                make_case(family, adapter, base, data, folder)
            for reader, checkout in checkouts.items():
                files = reader_files(reader, case)
                if not files:
                    continue
                command = [sys.executable, __file__, "--reader", reader, "--case", str(case_file),
                           "--checkout", str(checkout), *(f"--site={s}" for s in args.site),
                           *(f"--file={f}" for f in files)]
                done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(ROOT))
                found = [line for line in done.stdout.splitlines() if line.startswith("ROWS ")]
                if found:
                    got = json.loads(found[-1][5:])
                else:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:160]
                    got = [{"reader": reader, "family": family, "adapter": adapter, "file": f, "keys_loaded": 0,
                            "keys_total": 0, "layers_applied": 0, "layers_trained": 0, "rel_error": None,
                            "note": f"reader process failed: {tail}"} for f in files]
                for row in got:
                    print(json.dumps(row), flush=True)
                rows += got
    commits = {name: _commit(path) for name, path in checkouts.items() if not name.startswith("lycoris")}
    if "lycoris (merge_to)" in checkouts:
        commits["lycoris-lora"] = _lycoris_version(args.site)
    print(table(rows))
    if args.write:
        write_outputs(rows, commits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
