"""Sample prompts with their own settings, as other trainers' prompt files write them ("a cat --w 96 --d 5"):
each picture is drawn at its own size, seed and negative prompt."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures.training import train_in_process
from PIL import Image

from studio.core.config.schema import MethodSection, OutputSection, SamplingSection, TrainingSection
from studio.core.runs.events import RunFinished, Sample

torch = pytest.importorskip("torch")


def test_each_sample_is_drawn_at_its_prompts_own_size_and_seed(
    tiny_sd15: Path, demo_data: Path, tmp_path: Path, events_of
) -> None:
    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig

    prompts = ["a red circle --w 96 --h 64 --d 5", "a red circle --h 80 --d 5 --n blue",
               "a red circle --d 5 --h 64 --w 96", "a red circle --w 96 --h 64 --d 6"]
    prompts += [f"a blue square --s 1 --d {seed}" for seed in range(7)]  # eleven: the names sort past nine
    config = TrainConfig(
        model=ModelSection(family="sd15", base=str(tiny_sd15)),
        method=MethodSection(kind="lora", rank=4, alpha=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=2, learning_rate=5e-3, seed=3),
        sampling=SamplingSection(every_n_steps=2, prompts=prompts, steps=2, seed=1),
        output=OutputSection(dir=str(tmp_path / "runs"), name="options"),
    )
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0
    events = events_of(run_dir)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    (sample,) = [e for e in events if isinstance(e, Sample)]
    # The gallery shows each picture under the line the person wrote.
    assert sample.prompts == prompts
    pictures = [Image.open(path) for path in sample.images]
    assert [picture.size for picture in pictures] == [(96, 64), (64, 80), (96, 64), (96, 64)] + [(64, 64)] * 7
    names = [Path(path).name for path in sample.images]
    assert names[:2] == ["step-000002-00.png", "step-000002-01.png"] and sorted(names) == names
    pixels = [np.asarray(picture.convert("RGB")) for picture in pictures]
    # The same words, size and seed draw the same picture; another seed another one.
    assert np.array_equal(pixels[0], pixels[2])
    assert not np.array_equal(pixels[0], pixels[3])


def test_samples_at_start_show_the_base_models_pictures_once_not_again_on_resume(
    tiny_sd15: Path, demo_data: Path, tmp_path: Path, events_of, monkeypatch: pytest.MonkeyPatch
) -> None:
    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.core.runs.records.run_model import RunModel
    from studio.train.loop import Trainer

    config = TrainConfig(
        model=ModelSection(family="sd15", base=str(tiny_sd15)),
        method=MethodSection(kind="lora", rank=4, alpha=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=3, learning_rate=5e-3, seed=3),
        sampling=SamplingSection(every_n_steps=3, at_start=True, prompts=["a red circle"], steps=1, seed=1),
        output=OutputSection(dir=str(tmp_path / "runs"), name="first", save_every_n_steps=1),
    )
    original = Trainer._after_step

    def stop_after_one(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == 1:
            (self.run_dir / "STOP").write_text("stop", encoding="utf-8")

    monkeypatch.setattr(Trainer, "_after_step", stop_after_one)
    code, run_dir = train_in_process(config, tmp_path)
    assert code == 0
    monkeypatch.setattr(Trainer, "_after_step", original)
    assert [e.step for e in events_of(run_dir) if isinstance(e, Sample)] == [0]
    assert (run_dir / "samples" / "step-000000-0.png").is_file()
    code, _ = train_in_process(None, tmp_path, resume_dir=run_dir)  # type: ignore[arg-type]
    assert code == 0
    events = events_of(run_dir)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    # The resumed leg starts at step 1: the base model's pictures are not made again.
    assert [e.step for e in events if isinstance(e, Sample)] == [0, 3]
    model = RunModel(run_dir)
    for event in events:
        model.apply(event)
    assert [sample.step for sample in model.samples] == [0, 3]  # the gallery's steps
