"""The diffusers-format LoRA file applies the trained change once in every reader, at alpha != rank,
for SD1.5 and SDXL (two text encoders), every module in one key style.

The file is loaded by diffusers' own `load_lora_weights` on the tiny pipeline (and fused), and read as
ComfyUI reads a diffusers-format file (comfy/lora.py + comfy/weight_adapter/lora.py: `<module>.lora_B`
/ `.lora_A` found by name, no `.alpha` key, so the scale is 1 and the change is lora_B @ lora_A), as
diffusers 0.32 does too (it reads no `lora_adapter_metadata`; the compatibility environment's
diffusers 0.3x loads it for real where `python dev.py setup` made it). Each module's change is compared with
the change peft computes for the trained layer (LoraLayer.get_delta_weight: alpha / rank * B @ A). The
LoRA is a LoCon with its own convolution alpha, on the UNet and the text encoder.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file

from studio.core.config.schema import MethodSection, OutputSection

torch = pytest.importorskip("torch")

RANK, ALPHA, CONV_RANK, CONV_ALPHA = 4, 12.0, 2, 7.0
FILE = "pytorch_lora_weights.safetensors"
ROOT = Path(__file__).resolve().parents[2]
COMPAT_PYTHON = ROOT / ".venv-compat" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
FUSED_CHANGE = Path(__file__).with_name("fused_change.py")


PIPELINES = {"sd15": "StableDiffusionPipeline", "sdxl": "StableDiffusionXLPipeline"}


@pytest.fixture(scope="module", params=list(PIPELINES))
def trained(request, tiny_model, demo_data: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A tiny LoCon moved off its start as training would move it, its family, its diffusers file, and the
    change each trained layer makes (by the module's full name in the pipeline: `unet.<name>`,
    `text_encoder.<name>`, `text_encoder_2.<name>`)."""
    from peft.tuners.lora import LoraLayer

    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.train.families import adapter_for
    from studio.train.saving.outputs import _lora_parts

    family = request.param
    folder = tmp_path_factory.mktemp(f"strength-{family}")
    base = tiny_model(family)
    config = TrainConfig(
        model=ModelSection(family=family, base=str(base)),
        method=MethodSection(kind="lora", network="locon", rank=RANK, alpha=ALPHA, conv_rank=CONV_RANK,
                             conv_alpha=CONV_ALPHA, train_text_encoder=True),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        output=OutputSection(dir=str(folder), name="strength", formats=["diffusers"], save_precision="fp32"),
    )
    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    adapter.add_lora(components)
    generator = torch.Generator().manual_seed(11)
    changes: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        encoders = zip(adapter.text_encoder_names, components.text_encoders, strict=True)
        for component, module in (("unet", components.denoiser), *encoders):
            for name, layer in module.named_modules():
                if isinstance(layer, LoraLayer):
                    up = layer.lora_B["default"].weight
                    up.copy_(0.1 * torch.randn(up.shape, generator=generator))
                    changes[f"{component}.{name}"] = layer.get_delta_weight("default").detach().clone()
    adapter.save_lora(folder, *_lora_parts(adapter, components), metadata={})
    return family, base, folder, changes


def _relative(applied: dict[str, torch.Tensor], changes: dict[str, torch.Tensor]) -> float:
    return max(float((applied[name] - change).norm() / change.norm()) for name, change in changes.items())


def _file_key(name: str) -> str:
    """A module's key prefix in the diffusers file: the CLIP model's keys keep its `text_model.` level."""
    component, _, rest = name.partition(".")
    if component.startswith("text_encoder") and not rest.startswith("text_model."):
        rest = f"text_model.{rest}"
    return f"{component}.{rest}"


def _up_down(state: dict[str, torch.Tensor], key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A module's up and down weights as ComfyUI finds them (LoRAAdapter.load tries these names: peft's
    `.lora_B`/`.lora_A`, diffusers' `.lora.up`/`.lora.down`, the text encoders' `.lora_linear_layer.up`/`.down`)."""
    for up, down in (("lora_B", "lora_A"), ("lora.up", "lora.down"), ("lora_linear_layer.up", "lora_linear_layer.down")):
        if f"{key}.{up}.weight" in state:
            return state[f"{key}.{up}.weight"], state[f"{key}.{down}.weight"]
    raise KeyError(f"{key} has no LoRA weights ComfyUI reads")


def test_the_file_says_alpha_equals_rank_and_holds_the_scale_in_its_up_weights(trained) -> None:  # type: ignore[no-untyped-def]
    _family, _base, folder, changes = trained
    with safe_open(str(folder / FILE), "pt") as handle:
        meta = json.loads(handle.metadata()["lora_adapter_metadata"])  # diffusers packs it as "<component>.<key>"
    encoders = {name.partition(".")[0] for name in changes} - {"unet"}
    assert encoders == ({"text_encoder", "text_encoder_2"} if _family == "sdxl" else {"text_encoder"})
    assert meta["unet.lora_alpha"] == meta["unet.r"] == RANK
    assert all(meta[f"{name}.lora_alpha"] == meta[f"{name}.r"] for name in encoders)
    assert set(meta["unet.alpha_pattern"].values()) == {CONV_RANK}
    assert meta["unet.alpha_pattern"] == meta["unet.rank_pattern"]
    assert not [k for k in load_file(str(folder / FILE)) if k.endswith(".alpha")]
    assert any(change.dim() == 4 for change in changes.values()), "the LoCon's convolutions are in the comparison"


def test_the_denoiser_s_modules_are_written_in_one_key_style(trained) -> None:  # type: ignore[no-untyped-def]
    """diffusers' `load_lora_adapter` picks its key conversion from the first key: a file mixing
    `.lora.down` (attention) and `.lora_A` (convolutions) had half its layers dropped, silently."""
    _family, _base, folder, changes = trained
    denoiser = [key for key in load_file(str(folder / FILE)) if key.startswith("unet.")]
    styles = {"peft" if ".lora_A." in key or ".lora_B." in key else "other" for key in denoiser}
    assert styles == {"peft"}, sorted(key for key in denoiser if ".lora_A." not in key and ".lora_B." not in key)[:5]
    assert len(denoiser) == 2 * len([name for name in changes if name.startswith("unet.")])


def test_comfyui_and_diffusers_0_32_apply_the_trained_change(trained) -> None:  # type: ignore[no-untyped-def]
    _family, _base, folder, changes = trained
    state = load_file(str(folder / FILE))
    applied = {}
    for name, change in changes.items():
        up, down = _up_down(state, _file_key(name))
        # comfy/weight_adapter/lora.py: no alpha key -> alpha 1.0; lora_diff = mm(up, down) in the weight's shape.
        applied[name] = torch.mm(up.flatten(start_dim=1), down.flatten(start_dim=1)).reshape(change.shape)
    assert _relative(applied, changes) <= 1e-4


def test_diffusers_load_lora_weights_applies_the_trained_change(trained) -> None:  # type: ignore[no-untyped-def]
    import diffusers

    family, base, folder, changes = trained
    extra = {"safety_checker": None, "requires_safety_checker": False} if family == "sd15" else {}
    pipe = getattr(diffusers, PIPELINES[family]).from_pretrained(str(base), **extra)
    modules = {name: getattr(pipe, name) for name in ("unet", "text_encoder", "text_encoder_2") if hasattr(pipe, name)}

    def weights() -> dict[str, torch.Tensor]:
        out = {}
        for name in changes:
            component, _, rest = name.partition(".")
            out[name] = modules[component].get_submodule(rest).weight.detach().clone()
        return out

    before = weights()
    pipe.load_lora_weights(str(folder), weight_name=FILE)
    pipe.fuse_lora(components=list(modules), lora_scale=1.0)
    after = weights()
    assert _relative({n: after[n] - before[n] for n in changes}, changes) <= 1e-4


@pytest.mark.slow
@pytest.mark.skipif(not COMPAT_PYTHON.exists(), reason=(
    f"no compatibility environment at {COMPAT_PYTHON.parent.parent}: `python dev.py setup` makes it"))
def test_diffusers_0_3x_applies_the_trained_change(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """diffusers 0.32 reads no adapter metadata: before alpha / rank was in the up weights, it applied
    this file at rank / alpha of its strength."""
    family, base, folder, changes = trained
    case = {"pipeline": PIPELINES[family], "base": str(base), "folder": str(folder), "weight_name": FILE,
            "names": list(changes),
            "out": str(tmp_path / "changes.safetensors")}
    done = subprocess.run([str(COMPAT_PYTHON), str(FUSED_CHANGE)], input=json.dumps(case), capture_output=True,
                          text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["diffusers"].startswith("0.3")
    assert _relative(load_file(case["out"]), changes) <= 1e-4
