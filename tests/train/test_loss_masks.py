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


def _mask_folder_source(tmp_path: Path) -> object:
    from studio.train.data.masks import MaskSource

    return MaskSource(DatasetSection(concepts=[ConceptSection(path=str(tmp_path))], masks="folder",
                                     mask_folder=str(tmp_path / "masks")))


def test_16_bit_and_palette_masks_at_half_grey_weigh_half(tmp_path: Path) -> None:
    from studio.train.data.masks import mask_array

    (tmp_path / "masks").mkdir()
    Image.fromarray(np.full((8, 8), 32768, dtype=np.uint16)).save(tmp_path / "masks" / "deep.png")
    palette = Image.new("P", (8, 8), 1)
    palette.putpalette([0, 0, 0, 128, 128, 128, 255, 255, 255])  # entry 1 is 50% grey
    palette.save(tmp_path / "masks" / "palette.png")
    for name, mode in (("deep", "I;16"), ("palette", "P")):
        with Image.open(tmp_path / "masks" / f"{name}.png") as written:
            assert written.mode == mode
    Image.fromarray(np.full((8, 8), 65535, dtype=np.uint16)).save(tmp_path / "masks" / "white16.png")
    source = _mask_folder_source(tmp_path)
    picture = Image.new("RGB", (8, 8))
    weights = {name: mask_array(source.open(Path(f"{name}.jpg"), picture)) for name in  # type: ignore[attr-defined]
               ("deep", "palette", "white16")}
    assert weights["deep"].mean() == pytest.approx(0.5, abs=1 / 255)
    assert weights["palette"].mean() == pytest.approx(0.5, abs=1 / 255)
    assert weights["white16"].min() == 1.0


def test_a_broken_mask_stops_the_run_before_it_starts_naming_its_file(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from studio.train.data.masks import check_mask_files
    from studio.train.errors import TrainError

    (tmp_path / "masks").mkdir()
    Image.new("L", (48, 48), 255).save(tmp_path / "masks" / "wide.png")
    items = [SimpleNamespace(path=tmp_path / "wide.png", size=(64, 48), is_class=False),
             SimpleNamespace(path=tmp_path / "bare.png", size=(64, 48), is_class=False)]
    dataset = DatasetSection(concepts=[ConceptSection(path=str(tmp_path))], masks="folder",
                             mask_folder=str(tmp_path / "masks"))
    with pytest.raises(TrainError) as raised:
        check_mask_files(items, dataset, lambda *_: None)
    assert f"{tmp_path / 'masks' / 'wide.png'}: the mask is 48x48 but its image wide.png is 64x48" in str(raised.value)
    assert raised.value.hint == "save the mask at 64x48, the size of wide.png"
    Image.new("L", (32, 24), 255).save(tmp_path / "masks" / "wide.png")  # half size, same shape: scaled
    warnings: list[str] = []
    check_mask_files(items, dataset, lambda message, *_: warnings.append(message))
    assert warnings == [f"1 of the training images have no mask in {tmp_path / 'masks'} (e.g. bare.png); "
                        "they train whole"]
