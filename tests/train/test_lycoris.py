"""LoHa, LoKr and LoCon: the files ComfyUI, A1111/Forge and kohya's sd-scripts load.

- Full-size SD1.5 and SDXL (meta device, no weights): every module of the LyCORIS file has a name
  ComfyUI maps (comfy/lora.py: `lora_unet_` + a diffusers UNet weight name with "." as "_", the text
  encoders' `lora_te_`/`lora_te1_`/`lora_te2_text_model_encoder_layers_{n}_{part}`) and that sd-scripts
  builds (its LoRA/LyCORIS networks name the Linear and Conv2d layers inside Transformer2DModel,
  ResnetBlock2D, Downsample2D, Upsample2D, CLIPAttention and CLIPMLP), with the factor keys ComfyUI
  detects (`hada_w1_a` ... `lokr_w2_b`) and an `alpha` for each module; the estimate counts the
  adapter's parameters exactly.
- The weight difference ComfyUI computes from the file is the one peft trained (merged), for whole
  and decomposed LoKr factors and LoHa, on attention and convolution layers.
- LoKr and LoHa trained on the tiny SD1.5 and SDXL pipelines load back with the studio's loader.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fixtures.hub_layout import hub_keys
from fixtures.sdxl_names import sai_name
from fixtures.training import train_in_process
from safetensors import safe_open

from studio.core.config.schema import MethodSection, OutputSection, TrainingSection

torch = pytest.importorskip("torch")

CLIP_PARTS = ("mlp_fc1", "mlp_fc2", "self_attn_k_proj", "self_attn_q_proj", "self_attn_v_proj", "self_attn_out_proj")
TEXT_PREFIXES = {"sd15": {"text_encoder": "lora_te_"}, "sdxl": {"text_encoder": "lora_te1_",
                                                                 "text_encoder_2": "lora_te2_"}}
SD_SCRIPTS_BLOCKS = ("Transformer2DModel", "ResnetBlock2D", "Downsample2D", "Upsample2D")
CLIP_BLOCKS = ("CLIPAttention", "CLIPSdpaAttention", "CLIPMLP")
# What ComfyUI's LoHa and LoKr loaders read (weight_adapter/loha.py, lokr.py).
FACTORS = {"loha": {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"},
           "lokr": {"lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b"}}
# Attention projections: SD1.5 16 blocks x 2 x 4 + 12 text layers x 4; SDXL 70 x 8 + (11 + 32) x 4.
ATTENTION_COUNTS = {"sd15": 128 + 48, "sdxl": 560 + 44 + 128}


def _unet_name(family: str, module: str) -> str:
    """`lora_unet_` + a UNet module's name as A1111/Forge, sd-scripts and ComfyUI find it: the diffusers name for
    SD1.x (sd-scripts' own SD1 UNet), the SAI name for SDXL."""
    return "lora_unet_" + (sai_name(module) if family == "sdxl" else module).replace(".", "_")


def _comfyui_names(family: str) -> set[str]:
    names = {_unet_name(family, k.removesuffix(".weight")) for k in hub_keys(family, "unet") if k.endswith(".weight")}
    for encoder, prefix in TEXT_PREFIXES[family].items():
        layers = {int(k.split(".")[3]) for k in hub_keys(family, encoder) if k.startswith("text_model.encoder.layers.")}
        names |= {f"{prefix}text_model_encoder_layers_{n}_{part}" for n in layers for part in CLIP_PARTS}
    return names


def _sd_scripts_names(root: Any, prefix: str, blocks: tuple[str, ...], clip: bool, family: str = "sd15") -> set[str]:
    names = set()
    for name, module in root.named_modules():
        if type(module).__name__ in blocks:
            for child_name, child in module.named_modules():
                if isinstance(child, torch.nn.Linear | torch.nn.Conv2d) and child_name:
                    path = f"{name}.{child_name}"
                    if clip and not path.startswith("text_model."):
                        path = f"text_model.{path}"
                    names.add(prefix + path.replace(".", "_") if clip else _unet_name(family, path))
    return names


def _full_size_file(make_config: Any, family: str, network: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The LyCORIS state dict of a full-size `family` adapter (meta device), the plain model, the config."""
    from studio.train.components import Components
    from studio.train.families import adapter_for
    from studio.train.networks.lycoris_file import lycoris_state_dict
    from studio.train.pipelines.full_size import components
    from studio.train.saving.outputs import _lora_parts

    config = make_config(family, method=MethodSection(kind="lora", rank=16, alpha=8, network=network, conv_rank=4,
                                                      train_text_encoder=True))
    adapter = adapter_for(config)
    parts = components(family, "meta", t5=False)
    encoders = [parts[name] for name in adapter.text_encoder_names if name in parts]
    built = Components(denoiser=parts["unet"], vae=parts["vae"], text_encoders=encoders, tokenizers=[], scheduler=None)
    adapter.add_lora(built)
    layers, configs = _lora_parts(adapter, built)
    scales = {name: cfg["lycoris_scales"] for name, cfg in configs.items()}
    return lycoris_state_dict(layers, scales, namer=adapter.lycoris_name), components(family, "meta", t5=False), built


@pytest.mark.parametrize("network", ["lokr", "loha"])
@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_full_size_file_has_the_names_comfyui_and_sd_scripts_read(make_config: Any, family: str,
                                                                   network: str) -> None:
    state, plain, built = _full_size_file(make_config, family, network)
    modules: dict[str, set[str]] = {}
    for key in state:
        name, _, factor = key.partition(".")
        modules.setdefault(name, set()).add(factor)
    assert sorted(set(modules) - _comfyui_names(family))[:5] == []
    sd_scripts = _sd_scripts_names(plain["unet"], "lora_unet_", SD_SCRIPTS_BLOCKS, clip=False, family=family)
    for encoder, prefix in TEXT_PREFIXES[family].items():
        sd_scripts |= _sd_scripts_names(plain[encoder], prefix, CLIP_BLOCKS, clip=True)
    assert sorted(set(modules) - sd_scripts)[:5] == []
    for name, factors in modules.items():
        assert "alpha" in factors, name
        factors = factors - {"alpha"}
        assert factors <= FACTORS[network], (name, factors)
        if network == "lokr":  # each factor whole or as a pair
            assert ("lokr_w1" in factors) != ({"lokr_w1_a", "lokr_w1_b"} <= factors), name
            assert ("lokr_w2" in factors) != ({"lokr_w2_a", "lokr_w2_b"} <= factors), name
        else:
            assert factors == FACTORS["loha"], name
    # The attention projections and text layers, and every convolution of the resnets, down- and upsamplers.
    convolutions = sum(1 for n, m in plain["unet"].named_modules() if isinstance(m, torch.nn.Conv2d)
                       and _unet_name(family, n) in sd_scripts and "attentions" not in n)
    assert len(modules) == ATTENTION_COUNTS[family] + convolutions
    assert {p for p in ("lora_unet_", *TEXT_PREFIXES[family].values()) if any(m.startswith(p) for m in modules)} \
        == {"lora_unet_", *TEXT_PREFIXES[family].values()}
    # A large layer's LoKr decomposes its large factor at rank 16, and its alpha is the config's.
    q = _unet_name(family, "mid_block.attentions.0.transformer_blocks.0.attn1.to_q")
    if network == "lokr":
        assert {f"{q}.lokr_w1", f"{q}.lokr_w2_a", f"{q}.lokr_w2_b"} <= set(state)
    assert float(state[f"{q}.alpha"]) == 8.0
    if family == "sd15":  # the estimate counts the attention layers' adapter exactly
        from studio.core.estimate.memory_data import load_architecture, lora_params

        attention = sum(p.numel() for n, p in built.denoiser.named_parameters() if p.requires_grad and "attentions" in n)
        targets = load_architecture("sd15")["components"]["unet"]["lora_targets"]
        assert lora_params(targets, 16, network=network) == attention


@pytest.mark.parametrize(("network", "rank"), [("lokr", 4), ("lokr", 1), ("loha", 2)])
def test_the_file_makes_the_weights_peft_trained(tiny_sd15: Path, tmp_path: Path, network: str, rank: int) -> None:
    """ComfyUI's arithmetic over the written file gives the very weights peft's merge makes, for a LoKr
    whose factors are whole (rank 4 on the tiny layers: scale folded in) or decomposed, and a LoHa."""
    from diffusers import UNet2DConditionModel
    from peft.tuners.tuners_utils import BaseTunerLayer
    from safetensors.torch import save_file

    from studio.train.networks.lycoris import adapter_config, adapter_scales, conv_targets
    from studio.train.networks.lycoris_file import load_lycoris, lycoris_state_dict

    trained = UNet2DConditionModel.from_pretrained(tiny_sd15 / "unet")
    method = MethodSection(network=network, rank=rank, alpha=3.0, conv_rank=2)
    trained.add_adapter(adapter_config(method, ["to_q", "to_k", "to_v", "to_out.0"], rank, 3.0,
                                       conv_targets(trained)))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in (p for p in trained.parameters() if p.requires_grad):
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    from peft.utils import get_peft_model_state_dict

    state = lycoris_state_dict({"unet": get_peft_model_state_dict(trained)}, {"unet": adapter_scales(trained)})
    save_file(state, str(tmp_path / "net.safetensors"))
    loaded = UNet2DConditionModel.from_pretrained(tiny_sd15 / "unet")
    applied = load_lycoris(tmp_path / "net.safetensors", {"unet": loaded})
    for module in trained.modules():
        if isinstance(module, BaseTunerLayer):
            module.merge()
    merged = {k.replace(".base_layer", ""): v for k, v in trained.state_dict().items()}
    base = UNet2DConditionModel.from_pretrained(tiny_sd15 / "unet").state_dict()
    changed = [k for k, v in loaded.state_dict().items() if not torch.equal(v, base[k])]
    assert len(changed) == len(applied) == 32 + len(conv_targets(loaded))
    for key in changed:
        torch.testing.assert_close(loaded.state_dict()[key], merged[key], atol=1e-6, rtol=1e-5)


@pytest.fixture(scope="module")
def lycoris_runs(tiny_sd15: Path, tiny_sdxl: Path, demo_data: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig

    root = tmp_path_factory.mktemp("lycoris")
    runs = {}
    for family, base in (("sd15", tiny_sd15), ("sdxl", tiny_sdxl)):
        for network in ("lokr", "loha"):
            config = TrainConfig(
                model=ModelSection(family=family, base=str(base)),
                method=MethodSection(kind="lora", rank=2, network=network, conv_rank=2, train_text_encoder=True),
                dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
                training=TrainingSection(batch_size=2, max_steps=2, learning_rate=1e-2, seed=3),
                output=OutputSection(dir=str(root / "runs"), name=f"{family}-{network}", save_precision="fp32"),
            )
            code, run_dir = train_in_process(config, root)
            assert code == 0
            runs[family, network] = run_dir
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("network", ["lokr", "loha"])
@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_a_trained_lycoris_loads_back(lycoris_runs: dict[tuple[str, str], Path], family: str, network: str,
                                      tiny_sd15: Path, tiny_sdxl: Path) -> None:
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    from studio.train.families import adapter_for
    from studio.train.networks.lycoris_file import load_lycoris

    run_dir = lycoris_runs[family, network]
    output = run_dir / "output"
    # One LyCORIS file (diffusers' loader reads LoRA only), named by the run, with kohya's network metadata.
    assert sorted(p.name for p in output.glob("*.safetensors")) == [f"{family}-{network}.safetensors"]
    path = output / f"{family}-{network}.safetensors"
    with safe_open(str(path), "pt") as handle:
        metadata = handle.metadata()
        keys = list(handle.keys())
    assert metadata["ss_network_module"] == "lycoris.kohya"
    assert json.loads(metadata["ss_network_args"])["algo"] == network
    assert all(k.split(".", 1)[1] in FACTORS[network] | {"alpha"} for k in keys)
    base = {"sd15": tiny_sd15, "sdxl": tiny_sdxl}[family]
    parts: dict[str, Any] = {"unet": UNet2DConditionModel.from_pretrained(base / "unet"),
                             "text_encoder": CLIPTextModel.from_pretrained(base / "text_encoder")}
    if family == "sdxl":
        parts["text_encoder_2"] = CLIPTextModelWithProjection.from_pretrained(base / "text_encoder_2")
    before = {name: {k: v.clone() for k, v in m.state_dict().items()} for name, m in parts.items()}
    from studio.core.config.files.toml_file import load_config

    adapter = adapter_for(load_config(run_dir / "config.toml"))
    if family == "sdxl":  # its UNet's layers are named by their original place, which its config says
        adapter.read_layout(parts["unet"])
    applied = load_lycoris(path, parts, namer=adapter.lycoris_name)
    assert len(applied) == len({k.split(".")[0] for k in keys})
    for name, module in parts.items():  # the training moved every component's weights
        assert any(not torch.equal(v, before[name][k]) for k, v in module.state_dict().items()), name
    with pytest.raises(ValueError, match="names no layer of this model"):
        load_lycoris(path, {"unet": parts["unet"]}, namer=adapter.lycoris_name)


def test_a_locon_adds_the_convolutions_to_both_lora_files(tiny_sd15: Path, demo_data: Path, tmp_path: Path) -> None:
    """A LoCon is a LoRA on the convolution layers too: the kohya file has them at their own rank and alpha
    (sd-scripts' conv_dim/conv_alpha in its metadata), and diffusers loads the diffusers file with them."""
    from diffusers import StableDiffusionPipeline
    from peft.tuners.tuners_utils import BaseTunerLayer

    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig

    config = TrainConfig(
        model=ModelSection(family="sd15", base=str(tiny_sd15)),
        method=MethodSection(kind="lora", rank=4, alpha=4, network="locon", conv_rank=2, conv_alpha=1.0),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=1, learning_rate=1e-2, seed=3),
        output=OutputSection(dir=str(tmp_path / "runs"), name="locon"),
    )
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0
    with safe_open(str(run_dir / "output" / "locon.safetensors"), "pt") as handle:
        conv = "lora_unet_down_blocks_0_resnets_0_conv1"
        assert handle.get_tensor(f"{conv}.lora_down.weight").shape[:2] == (2, 32)
        assert handle.get_tensor(f"{conv}.lora_down.weight").dim() == 4
        assert float(handle.get_tensor(f"{conv}.alpha")) == 1.0
        attention = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"
        assert float(handle.get_tensor(f"{attention}.alpha")) == 4.0
        assert json.loads(handle.metadata()["ss_network_args"]) == {"conv_dim": "2", "conv_alpha": "1.0"}
    pipe = StableDiffusionPipeline.from_pretrained(tiny_sd15, safety_checker=None, requires_safety_checker=False)
    pipe.load_lora_weights(run_dir / "output")
    layer = pipe.unet.down_blocks[0].resnets[0].conv1
    assert isinstance(layer, BaseTunerLayer) and layer.r[next(iter(layer.r))] == 2


@pytest.mark.parametrize("network", ["lokr", "loha"])
def test_a_flux2_klein_lycoris_file_is_named_as_comfyui_maps_it(tiny_flux2_klein: Path, demo_data: Path,
                                                               tmp_path: Path, network: str) -> None:
    """ComfyUI finds a FLUX.2 layer by its original name (`lora_unet_single_blocks_0_linear1`), and a part of
    the fused q/k/v (which a Kronecker or Hadamard product cannot join) by its diffusers name through its Flux
    key map (`lora_transformer_transformer_blocks_0_attn_to_q`, placed at its rows). Under diffusers names
    the single-stream blocks, the feed-forwards and the embedders were "lora key not loaded" there."""
    from diffusers import Flux2Transformer2DModel

    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.train.families import adapter_for
    from studio.train.families.flux2_klein_names import comfy_key, original_module
    from studio.train.networks.lycoris_file import load_lycoris

    config = TrainConfig(
        model=ModelSection(family="flux2-klein", base=str(tiny_flux2_klein)),
        method=MethodSection(kind="lora", rank=2, network=network),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=1, learning_rate=1e-2, seed=3),
        output=OutputSection(dir=str(tmp_path / "runs"), name="klein"),
    )
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0
    path = run_dir / "output" / "klein.safetensors"
    with safe_open(str(path), "pt") as handle:
        modules = {key.split(".")[0] for key in handle.keys()}  # noqa: SIM118 - not a dict
        assert "flux-2-klein" in handle.metadata()["modelspec.architecture"]
    # The q/k/v parts ComfyUI's Flux map places (FLUX.1 and FLUX.2 name them alike in diffusers).
    qkv = re.compile(r"^lora_transformer_transformer_blocks_\d+_attn_(to_[qkv]|add_[qkv]_proj)$")
    parts = {name for name in modules if qkv.match(name)}
    assert "lora_transformer_transformer_blocks_0_attn_to_q" in parts
    # Every other module under the original name of a layer of the model ComfyUI holds.
    transformer = Flux2Transformer2DModel.from_pretrained(tiny_flux2_klein / "transformer")
    originals = {comfy_key(original_module(name)[0]) for name, layer in transformer.named_modules()
                 if isinstance(layer, torch.nn.Linear) and _has_original(name)}
    assert modules - parts and modules - parts <= originals
    assert {"lora_unet_single_blocks_0_linear1", "lora_unet_single_blocks_0_linear2"} <= modules
    adapter = adapter_for(config)
    assert len(load_lycoris(path, {"transformer": transformer}, namer=adapter.lycoris_name)) == len(modules)


def _has_original(module: str) -> bool:
    from studio.train.errors import TrainError
    from studio.train.families.flux2_klein_names import original_module

    try:
        original_module(module)
    except TrainError:
        return False
    return True
