"""DreamBooth with prior preservation: class images are generated, the pipeline folder loads and differs."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.hub_layout import assert_folder_in_hub_layout

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    OutputSection,
    TrainingSection,
)
from studio.core.runs.events import Phase, RunFinished, RunStarted

torch = pytest.importorskip("torch")


def _image(pipe) -> np.ndarray:
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a photo of sks dog", num_inference_steps=3, height=64, width=64,
               generator=torch.Generator("cpu").manual_seed(3), output_type="np")
    return np.asarray(out.images[0])


def test_dreambooth_with_prior_preservation(make_config, run_training, events_of, demo_data, tiny_sd15, tmp_path) -> None:
    from diffusers import StableDiffusionPipeline

    concept = ConceptSection(path=str(demo_data), instance_prompt="a photo of sks dog", caption_source="prompt",
                             class_prompt="a photo of a dog", num_class_images=3, prior_loss_weight=0.5)
    config = make_config(
        method=MethodSection(kind="dreambooth"),
        dataset=DatasetSection(concepts=[concept], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=4, learning_rate=1e-4, seed=1),
        output=OutputSection(dir=str(tmp_path / "runs"), save_precision="fp32"),
    )
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0, events
    class_images = sorted((run_dir / "class_images" / "concept-0").glob("*.png"))
    assert len(class_images) == 3
    assert any(isinstance(e, Phase) and e.name == "class_images" for e in events)
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.num_images == 8 + 3 * 3  # class images repeated to balance the 8 instance images
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed"
    output = run_dir / "output"
    assert (output / "model_index.json").is_file() and (output / "unet").is_dir()
    assert {"unet", "vae", "text_encoder"} <= set(assert_folder_in_hub_layout(output, "sd15"))
    base = StableDiffusionPipeline.from_pretrained(str(tiny_sd15), safety_checker=None,
                                                   requires_safety_checker=False)
    tuned = StableDiffusionPipeline.from_pretrained(str(output), safety_checker=None, requires_safety_checker=False)
    assert np.abs(_image(tuned) - _image(base)).max() > 1e-3


def test_class_images_made_beside_kept_ones_never_overwrite_them(make_config, run_training, demo_data,
                                                                tmp_path) -> None:
    # Five class images made, the second deleted as a bad one: the one made in its place was numbered after the
    # count (class-00004) and overwrote the newest kept image.
    from PIL import Image

    folder = tmp_path / "class"
    folder.mkdir()
    for number, color in zip((0, 2, 3, 4), ("red", "green", "blue", "white"), strict=True):
        Image.new("RGB", (64, 64), color).save(folder / f"class-{number:05d}.png")
    kept = {p.name: p.read_bytes() for p in folder.iterdir()}
    concept = ConceptSection(path=str(demo_data), instance_prompt="a photo of sks dog", caption_source="prompt",
                             class_prompt="a photo of a dog", class_path=str(folder), num_class_images=5)
    config = make_config(method=MethodSection(kind="dreambooth"),
                         dataset=DatasetSection(concepts=[concept], resolution=64, buckets=False),
                         training=TrainingSection(batch_size=2, max_steps=1, learning_rate=1e-4, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers"]))
    code, _ = run_training(config, tmp_path)
    assert code == 0
    assert sorted(p.name for p in folder.iterdir()) == [f"class-{n:05d}.png" for n in range(5)]
    assert all((folder / name).read_bytes() == data for name, data in kept.items())
