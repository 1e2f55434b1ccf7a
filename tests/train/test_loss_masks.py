"""Loss masks: what a mask hides trains nothing, from the alpha channel or a folder, cached or not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from studio.core.config.schema import ConceptSection, DatasetSection, TrainConfig
from studio.core.runs.events import Event, RunFinished, Step

torch = pytest.importorskip("torch")


def _dataset(folder: Path, hidden_colour: tuple[int, int, int], alpha: bool = True) -> Path:
    """Four 64 px pictures; the last one's alpha is 0 everywhere (masked out), painted `hidden_colour`."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(4):
        rgb = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
        if i == 3:
            rgb[:] = hidden_colour
        a = np.full((64, 64, 1), 0 if i == 3 else 255, dtype=np.uint8)
        a[:, :16] = 0 if i == 1 else a[:, :16]  # a partly masked picture too
        Image.fromarray(np.concatenate([rgb, a], axis=2) if alpha else rgb).save(folder / f"p{i}.png")
        (folder / f"p{i}.txt").write_text(f"picture {i}", encoding="utf-8")
    return folder


def _train(make_config: Callable[..., TrainConfig], run_training: Callable[..., tuple[int, Path]],
           events_of: Callable[[Path], list[Event]], data: Path, root: Path, cached: bool = False,
           **dataset: object) -> tuple[list[float], list[float]]:
    config = make_config(dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=64,
                                                buckets=False, **dataset))  # type: ignore[arg-type]
    config.training.max_steps = 2
    config.training.batch_size = 4
    config.training.cache_latents = cached
    code, run_dir = run_training(config, root)
    assert code == 0
    events = events_of(run_dir)
    finished = next(e for e in events if isinstance(e, RunFinished))
    return [e.loss for e in events if isinstance(e, Step)], finished.weight_checksums


@pytest.mark.parametrize("cached", [False, True])
def test_masked_out_pixels_change_nothing(make_config: Callable[..., TrainConfig],
                                          run_training: Callable[..., tuple[int, Path]],
                                          events_of: Callable[[Path], list[Event]], tmp_path: Path,
                                          cached: bool) -> None:
    red = _dataset(tmp_path / "red", (250, 0, 0))
    blue = _dataset(tmp_path / "blue", (0, 0, 250))
    first = _train(make_config, run_training, events_of, red, tmp_path, cached, masks="alpha")
    second = _train(make_config, run_training, events_of, blue, tmp_path, cached, masks="alpha")
    assert first == second, "pixels the mask hides changed the loss or the trained weights"
    unmasked = _train(make_config, run_training, events_of, blue, tmp_path, cached)
    assert unmasked[1] != second[1]  # without the mask the same pictures train other weights


def test_a_mask_folder_weights_the_loss(make_config: Callable[..., TrainConfig],
                                        run_training: Callable[..., tuple[int, Path]],
                                        events_of: Callable[[Path], list[Event]], tmp_path: Path) -> None:
    red, blue = _dataset(tmp_path / "red", (250, 0, 0), False), _dataset(tmp_path / "blue", (0, 0, 250), False)
    masks = tmp_path / "masks"
    masks.mkdir()
    for i in range(4):
        Image.new("L", (64, 64), 0 if i == 3 else 255).save(masks / f"p{i}.png")
    first = _train(make_config, run_training, events_of, red, tmp_path, masks="folder", mask_folder=str(masks))
    second = _train(make_config, run_training, events_of, blue, tmp_path, masks="folder", mask_folder=str(masks))
    assert first == second


def test_a_mask_is_averaged_to_the_latent_size_and_hides_its_cells() -> None:
    from studio.train.data.masks import latent_mask, masked_mse

    mask = torch.ones(1, 1, 64, 64)
    mask[..., :32] = 0
    assert latent_mask(mask, (8, 8))[0, 0, 0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    target = torch.zeros(1, 4, 8, 8)
    prediction = torch.ones(1, 4, 8, 8)
    changed = prediction.clone()
    changed[..., :4] = 100.0  # only where the mask is 0
    ones = torch.ones(1)
    assert float(masked_mse(prediction, target, mask, ones)) == float(masked_mse(changed, target, mask, ones)) == 1.0


def test_a_mask_folder_is_needed_for_folder_masks() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"needs dataset\.mask_folder"):
        TrainConfig(model={"family": "sd15", "base": "x"}, dataset=DatasetSection(masks="folder"))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"dataset\.mask_folder"):
        TrainConfig(model={"family": "sd15", "base": "x"}, dataset=DatasetSection(mask_folder="m"))  # type: ignore[arg-type]
