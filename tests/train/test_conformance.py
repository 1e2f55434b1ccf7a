"""Every family's diffusers-format LoRA file, loaded by diffusers' own `load_lora_weights` and fused, changes
each trained layer exactly as the trainer's network does, at alpha != rank: for a LoRA and a DoRA, on the
denoiser and (where the family trains them) the text encoders.

The families come from the registry, so a new family is checked by declaring itself. The trained change is
peft's own merge of the layer (LoRA: alpha / rank * B @ A; DoRA: the magnitude times the normalised merged
weight), taken after the file is written; the network is moved off its start as training would move it
(random up weights, magnitudes scaled), without a training step. Other readers (ComfyUI's arithmetic,
diffusers 0.3x, LyCORIS) have their checks in test_diffusers_strength.py, test_dora_file.py and
test_lycoris.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import MethodSection, OutputSection
from studio.core.families import FAMILIES

torch = pytest.importorskip("torch")

RANK, ALPHA = 4, 12.0
FILE = "pytorch_lora_weights.safetensors"
CASES = [pytest.param(spec.name, dora, id=f"{spec.name}-{'dora' if dora else 'lora'}")
         for spec in FAMILIES for dora in (False, True)]


def _trained(family: str, dora: bool, tiny_model: Any, demo_data: Path, folder: Path) -> tuple[
        Path, dict[str, torch.Tensor], dict[str, torch.Tensor], list[str]]:
    """(base, each trained layer's weight before, and after peft merges it, the pipeline's trained components)
    of a tiny network of `family` moved off its start; its diffusers file is written into `folder`."""
    from peft.tuners.lora import LoraLayer

    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.core.families.registry import family as family_spec
    from studio.train.families import adapter_for
    from studio.train.saving.outputs import _lora_parts

    base = tiny_model(family)
    config = TrainConfig(
        model=ModelSection(family=family, base=str(base)),
        method=MethodSection(kind="lora", rank=RANK, alpha=ALPHA, use_dora=dora,
                             train_text_encoder=family_spec(family).trains_text_encoders),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        output=OutputSection(dir=str(folder), name="conformance", formats=["diffusers"], save_precision="fp32"),
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
                if isinstance(layer, LoraLayer):
                    up = layer.lora_B["default"].weight
                    up.copy_(0.1 * torch.randn(up.shape, generator=generator))
                    if dora:
                        magnitude = layer.lora_magnitude_vector["default"].weight
                        magnitude.mul_(1 + 0.2 * torch.rand(magnitude.shape, generator=generator))
                    layers[f"{component}.{name}"] = layer
    assert layers, f"{family}: no trained layer"
    adapter.save_lora(folder, *_lora_parts(adapter, components), metadata={})
    before, merged = {}, {}
    with torch.no_grad():
        for name, layer in layers.items():
            before[name] = layer.get_base_layer().weight.detach().clone()
            layer.merge(adapter_names=["default"])
            merged[name] = layer.get_base_layer().weight.detach().clone()
    return base, before, merged, list(trained)


@pytest.mark.parametrize(("family", "dora"), CASES)
def test_diffusers_applies_the_trained_change_of_every_family(family: str, dora: bool, tiny_model: Any,
                                                              demo_data: Path, tmp_path: Path) -> None:
    import diffusers

    from studio.core.families.registry import family as family_spec

    base, before, merged, parts = _trained(family, dora, tiny_model, demo_data, tmp_path)
    assert (tmp_path / FILE).is_file()
    pipeline_class = getattr(diffusers, family_spec(family).pipeline_class)
    # Only the parts the tiny model has: SD1.5 without its safety checker, SD3 without T5.
    expected = set(pipeline_class.__init__.__code__.co_varnames)
    extra: dict[str, Any] = {"safety_checker": None, "requires_safety_checker": False} \
        if "safety_checker" in expected else {}
    extra.update({name: None for name in ("text_encoder_3", "tokenizer_3") if name in expected
                  and not (base / name).is_dir()})
    pipe = pipeline_class.from_pretrained(str(base), **extra)

    def weight(name: str) -> torch.Tensor:
        component, _, module = name.partition(".")
        return getattr(pipe, component).get_submodule(module).weight.detach().clone()

    assert all(torch.equal(weight(name), value) for name, value in before.items()), "the pipeline is the base"
    pipe.load_lora_weights(str(tmp_path), weight_name=FILE)
    pipe.fuse_lora(components=parts, lora_scale=1.0)
    errors = {}
    for name, expected in merged.items():
        change = expected - before[name]
        errors[name] = float((weight(name) - expected).norm() / change.norm())
    worst = max(errors, key=errors.__getitem__)
    assert errors[worst] <= 1e-4, f"{len([e for e in errors.values() if e > 1e-4])} of {len(errors)} layers off; " \
                                  f"worst {worst}: {errors[worst]:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("family", ["sd15", "sdxl"])
def test_diffusers_0_3x_applies_the_trained_dora(family: str, tiny_model: Any, demo_data: Path, tmp_path: Path) -> None:
    """diffusers 0.32 with transformers 4.x (the compatibility environment) merges the DoRA file's magnitudes
    too, the text encoders' included (transformers 5 reads them as `...lora_magnitude_vector.weight`)."""
    import json
    import subprocess

    from safetensors.torch import load_file

    from tests.train.test_diffusers_strength import COMPAT_PYTHON, FUSED_CHANGE, PIPELINES

    if not COMPAT_PYTHON.exists():
        pytest.skip(f"no compatibility environment at {COMPAT_PYTHON.parent.parent}: `python dev.py setup` makes it")
    base, before, merged, _parts = _trained(family, True, tiny_model, demo_data, tmp_path / "out")
    case = {"pipeline": PIPELINES[family], "base": str(base), "folder": str(tmp_path / "out"), "weight_name": FILE,
            "names": list(merged), "out": str(tmp_path / "changes.safetensors")}
    done = subprocess.run([str(COMPAT_PYTHON), str(FUSED_CHANGE)], input=json.dumps(case), capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    applied = load_file(case["out"])
    worst = max(float((applied[n] - (merged[n] - before[n])).norm() / (merged[n] - before[n]).norm()) for n in merged)
    assert worst <= 1e-4
