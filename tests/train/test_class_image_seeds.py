"""DreamBooth class images topped up (the class-image count raised, or bad ones deleted) are new pictures: each
is made with a seed no kept image was made with, and records it.

The pipeline is replaced by one that paints each image in a colour made from its seed, so two images of the same
seed are the same picture, as they are with the real pipeline and one prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    ModelSection,
    TrainConfig,
    TrainingSection,
)

torch = pytest.importorskip("torch")

SEED = 7


class Phases:
    def phase(self, *args: Any, **kwargs: Any) -> None:
        pass


def _painted(seed: int) -> Any:
    from PIL import Image

    return Image.new("RGB", (8, 8), (seed % 251, seed * 7 % 251, seed * 13 % 251))


@pytest.fixture
def make_class_images(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """ensure_class_images for `count` class images in tmp_path/class, with the painting pipeline."""
    from studio.train import samples

    def render(adapter: Any, components: Any, plan: Any, jobs: list[Any], size: int, on_image: Any,
               progress: Any, references: Any = ()) -> None:
        for index, job in enumerate(jobs):
            on_image(index, _painted(job.seed))

    monkeypatch.setattr(samples, "render_images", render)
    folder = tmp_path / "class"

    def make(count: int) -> Path:
        concept = ConceptSection(path=str(tmp_path / "data"), instance_prompt="a photo of sks dog",
                                 caption_source="prompt", class_prompt="a photo of a dog", class_path=str(folder),
                                 num_class_images=count)
        config = TrainConfig(model=ModelSection(family="sd15", base=str(tmp_path / "base")),
                             method=MethodSection(kind="dreambooth"),
                             dataset=DatasetSection(concepts=[concept], resolution=64, buckets=False),
                             training=TrainingSection(batch_size=1, max_steps=1, seed=SEED))
        samples.ensure_class_images(None, None, None, config, tmp_path, True, Phases())  # type: ignore[arg-type]
        return folder

    return make


def _copies(pictures: dict[str, bytes]) -> list[str]:
    """The files whose picture another file holds too."""
    return [name for name, picture in pictures.items() if list(pictures.values()).count(picture) > 1]


def _pictures(folder: Path) -> dict[str, bytes]:
    from PIL import Image

    out = {}
    for path in sorted(folder.glob("*.png")):
        with Image.open(path) as image:
            out[path.name] = image.convert("RGB").tobytes()
    return out


def test_class_images_made_after_a_deleted_one_are_not_copies_of_kept_ones(make_class_images) -> None:
    folder = make_class_images(3)
    (folder / "class-00000.png").unlink()  # a bad one, deleted; and one more asked for
    make_class_images(4)
    pictures = _pictures(folder)
    assert len(pictures) == 4
    assert _copies(pictures) == []
    from PIL import Image

    seeds = []
    for path in sorted(folder.glob("*.png")):
        with Image.open(path) as image:
            seeds.append(int(image.info["seed"]))
    assert len(set(seeds)) == 4 and SEED not in seeds  # the deleted one's seed made nothing again here


def test_class_images_of_an_older_studio_are_not_made_again(make_class_images, tmp_path: Path) -> None:
    # Made before the seeds were recorded: class-0000N with the run's seed plus N; the first one deleted since.
    folder = tmp_path / "class"
    folder.mkdir()
    for number in (1, 2):
        _painted(SEED + number).save(folder / f"class-{number:05d}.png")
    make_class_images(4)
    pictures = _pictures(folder)
    assert len(pictures) == 4 and _copies(pictures) == []
