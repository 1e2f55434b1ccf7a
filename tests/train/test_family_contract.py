"""One contract, run for every declared family: its tiny model trains a few steps, the LoRA files are
written, and the diffusers file loads into the family's own pipeline and changes its denoiser.

Each family's particular checks (its key layouts, its readers, its settings) stay in its own tests
(test_sd3.py, test_zimage.py, ...); this one holds all of them to the same shape, found by name from
the registry, so a new family is tested the moment it is registered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures.training import train_in_process
from safetensors import safe_open

from studio.core.config.schema import MethodSection, OutputSection, TrainConfig, TrainingSection
from studio.core.families import FAMILY_NAMES, family
from studio.core.runs.events import RunFinished

torch = pytest.importorskip("torch")

STEPS = 2


def test_every_family_is_found_by_name_in_each_of_its_homes() -> None:
    from studio.train.families import adapter_for
    from studio.train.pipelines.tiny import tiny_families

    assert tiny_families() == sorted(FAMILY_NAMES)
    for name in FAMILY_NAMES:
        adapter = adapter_for(TrainConfig.model_validate({"model": {"family": name, "base": "x"}}))
        assert adapter.family == name
        assert adapter.denoiser_name == family(name).denoiser


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_the_tiny_model_trains_saves_and_reloads_in_its_pipeline(
        name: str, make_config: Callable[..., TrainConfig], events_of: Callable[[Path], list[object]],
        tmp_path: Path) -> None:
    import diffusers

    declared = family(name)
    config = make_config(
        name, method=MethodSection(kind="lora", rank=4, alpha=8),
        training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=5e-2, seed=1),
        output=OutputSection(dir=str(tmp_path / "runs"), name="contract", formats=["diffusers", "kohya"]),
    )
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0, (run_dir / "events.jsonl").read_text(encoding="utf-8")[-2000:]
    (finished,) = [e for e in events_of(run_dir) if isinstance(e, RunFinished)]
    assert finished.status == "completed"

    output = run_dir / "output"
    with safe_open(str(output / "contract.safetensors"), "pt") as handle:
        meta = handle.metadata()
    assert meta["modelspec.implementation"] == declared.lora_implementation
    assert meta["modelspec.prediction_type"] == declared.prediction

    base = Path(config.model.base)
    absent = {name: None for name in declared.components if not (base / name).is_dir()}  # SD3 without its T5
    absent.update({name.replace("text_encoder", "tokenizer"): None for name in absent if "text_encoder" in name})
    pipe = getattr(diffusers, declared.pipeline_class).from_pretrained(base, **absent)
    denoiser = getattr(pipe, declared.denoiser)
    before = {key: value.clone() for key, value in denoiser.state_dict().items()}
    pipe.load_lora_weights(str(output), weight_name="pytorch_lora_weights.safetensors")
    pipe.fuse_lora()
    pipe.unload_lora_weights()  # the fused weights stay, under the base model's own names
    changed = [key for key, value in denoiser.state_dict().items()
               if key in before and not torch.equal(value, before[key])]
    assert changed, f"the {declared.title} LoRA changed no weight of the {declared.denoiser}"
