"""One contract, run for every declared family: its tiny model trains a few steps with samples, the LoRA
files are written, the diffusers file loads into the family's own pipeline and changes its denoiser, a
run stopped halfway resumes to the very weights and losses of the uninterrupted one, and the estimate's
parts add up to its total. (That each setting acts or is refused, family by family: test_every_setting_acts.)

Each family's particular checks (its key layouts, its readers, its settings) stay in its own tests
(test_sd3.py, test_zimage.py, ...); this one holds all of them to the same shape, found by name from
the registry, so a new family is tested the moment it is registered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.training import train_in_process
from safetensors import safe_open
from safetensors.torch import load_file

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import (
    MethodSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.estimate.estimate import estimate_vram
from studio.core.families import FAMILY_NAMES, family
from studio.core.runs.events import Checkpoint, RunFinished, RunStarted, Sample, Step

torch = pytest.importorskip("torch")

STEPS = 4


def test_every_family_is_found_by_name_in_each_of_its_homes() -> None:
    from studio.train.families import adapter_for
    from studio.train.pipelines.tiny import tiny_families

    assert tiny_families() == sorted(FAMILY_NAMES)
    for name in FAMILY_NAMES:
        adapter = adapter_for(TrainConfig.model_validate({"model": {"family": name, "base": "x"}}))
        assert adapter.family == name
        assert adapter.denoiser_name == family(name).denoiser


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_the_tiny_model_trains_samples_saves_reloads_and_resumes_exactly(
        name: str, make_config: Callable[..., TrainConfig], events_of: Callable[[Path], list[object]],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import diffusers

    declared = family(name)
    config = make_config(
        name, method=MethodSection(kind="lora", rank=4, alpha=8),
        training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=5e-2, seed=1),
        # The prompt's own settings, as other trainers' prompt files write them: a wide picture, its seed, guidance.
        sampling=SamplingSection(prompts=["a red circle --w 96 --h 64 --d 5 --l 3.5"], every_n_steps=2, steps=2,
                                 seed=3),
        output=OutputSection(dir=str(tmp_path / "runs"), name="contract", formats=["diffusers", "kohya"]),
    )
    estimate = estimate_vram(resolve_paths(config, tmp_path), None)
    assert sum(part.mb for part in estimate.parts) == pytest.approx(estimate.total_mb, abs=0.5)

    code, run_dir = train_in_process(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0, (run_dir / "events.jsonl").read_text(encoding="utf-8")[-2000:]
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.status == "completed"
    samples = [e for e in events if isinstance(e, Sample)]
    assert {e.step for e in samples} >= {2, STEPS}
    assert all((run_dir / image).is_file() for e in samples for image in e.images)

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
    base_image = _pipeline_sample(name, pipe, config)
    pipe.load_lora_weights(str(output), weight_name="pytorch_lora_weights.safetensors")
    _sample_is_the_lora_s_picture(name, pipe, config, run_dir, samples, base_image)
    pipe.fuse_lora()
    pipe.unload_lora_weights()  # the fused weights stay, under the base model's own names
    changed = [key for key, value in denoiser.state_dict().items()
               if key in before and not torch.equal(value, before[key])]
    assert changed, f"the {declared.title} LoRA changed no weight of the {declared.denoiser}"

    _stop_at_two_and_resume(config, run_dir, events_of, tmp_path, monkeypatch)


def _pipeline_sample(name: str, pipe: Any, config: TrainConfig) -> np.ndarray:
    """The first sample prompt's picture as a person makes it with the family's own pipeline: the prompt's own
    seed, steps, guidance and size (else the run's); Qwen-Image guides with its true CFG and a blank negative
    prompt as its published examples do, FLUX.2 [klein] embeds the prompt to the tokenizer's length (the tiny
    model's 128)."""
    from studio.core.config.prompt_options import sample_draws

    draw = sample_draws(config.sampling, config.dataset.resolution, family(name).pixel_multiple)[0]
    arguments: dict[str, object] = {"guidance_scale": draw.guidance}
    if name == "qwen-image":
        arguments = {"true_cfg_scale": draw.guidance, "negative_prompt": " "}
    elif name == "flux2-klein":
        arguments["max_sequence_length"] = min(512, pipe.tokenizer.model_max_length)
    image = pipe(prompt=draw.text, num_inference_steps=draw.steps, height=draw.height, width=draw.width,
                 generator=torch.Generator("cpu").manual_seed(draw.seed), **arguments).images[0]
    return np.asarray(image).astype(np.float64)


def _sample_is_the_lora_s_picture(name: str, pipe: Any, config: TrainConfig, run_dir: Path,
                                  samples: list[Sample], base_image: np.ndarray) -> None:
    """The last sample shows what the finished LoRA makes in the family's pipeline: made another way (its
    scheduler, guidance, negative prompt, the text embedding, dropout left on, ...), a person judging the run by
    its samples would stop a good one. The file is stored in fp16: the pictures agree to a fraction of a level."""
    from PIL import Image

    last = next(e for e in samples if e.step == STEPS)
    sample = np.asarray(Image.open(run_dir / last.images[0]).convert("RGB")).astype(np.float64)
    with_lora = _pipeline_sample(name, pipe, config)
    trained = np.abs(with_lora - base_image).mean()
    assert trained > 0.5, f"the {family(name).title} LoRA hardly changes the picture ({trained:.2f} levels)"
    assert np.abs(sample - with_lora).mean() < trained / 20


def _stop_at_two_and_resume(config: TrainConfig, straight_dir: Path, events_of: Callable[[Path], list[object]],
                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run held to step 2 by a STOP written at that step (no race with the clock), then resumed, ends at
    the weights and losses of the uninterrupted run."""
    from studio.train.loop import Trainer

    original = Trainer._after_step

    def stop_after_two(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == 2:
            (self.run_dir / "STOP").write_text("stop", encoding="utf-8")

    monkeypatch.setattr(Trainer, "_after_step", stop_after_two)
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0
    events = events_of(run_dir)
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "stopped" and finished.step == 2
    assert any(isinstance(e, Checkpoint) and e.step == 2 for e in events)
    monkeypatch.setattr(Trainer, "_after_step", original)
    code, _ = train_in_process(config, tmp_path, resume_dir=run_dir)
    assert code == 0
    events = events_of(run_dir)
    assert [e.resumed_from_step for e in events if isinstance(e, RunStarted)] == [0, 2]
    resumed = load_file(str(run_dir / "output" / "pytorch_lora_weights.safetensors"))
    straight = load_file(str(straight_dir / "output" / "pytorch_lora_weights.safetensors"))
    assert resumed.keys() == straight.keys()
    for key in straight:
        torch.testing.assert_close(resumed[key].float(), straight[key].float(), atol=1e-5, rtol=1e-4)
    straight_losses = [round(e.loss, 5) for e in events_of(straight_dir) if isinstance(e, Step)]
    assert [round(e.loss, 5) for e in events if isinstance(e, Step)] == straight_losses
