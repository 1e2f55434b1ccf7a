"""The validation loss: held-out images measured at fixed noise, the same numbers for the same seed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from studio.core.config.schema import DatasetSection, TrainConfig, TrainingSection
from studio.core.runs.events import Error, Event, RunFinished, RunStarted, Step, Validation
from studio.core.runs.records.outcome import outcome_line

torch = pytest.importorskip("torch")


def _config(make_config: Callable[..., TrainConfig], demo_data: Path, seed: int = 1, **dataset: object) -> TrainConfig:
    config = make_config()
    data = config.model_dump()
    data["dataset"].update({"validation_fraction": 0.25, **dataset})
    data["training"].update(max_steps=4, validation_every=2, seed=seed)
    return TrainConfig.model_validate(data)


def test_same_seed_same_validation_losses(make_config: Callable[..., TrainConfig], demo_data: Path,
                                          run_training: Callable[..., tuple[int, Path]],
                                          events_of: Callable[[Path], list[Event]], tmp_path: Path) -> None:
    runs = []
    for seed in (1, 1, 2):
        code, run_dir = run_training(_config(make_config, demo_data, seed), tmp_path)
        assert code == 0
        runs.append(events_of(run_dir))
    losses = [[(e.step, e.loss) for e in events if isinstance(e, Validation)] for events in runs]
    assert [step for step, _ in losses[0]] == [2, 4]  # every 2 steps; the last step is the 4th
    assert losses[0] == losses[1], "two runs with the same seed measured different validation losses"
    assert losses[0] != losses[2]  # another seed trains other weights: the measure sees it
    first = next(e for e in runs[0] if isinstance(e, Validation))
    assert first.images == 2 and len(first.timesteps) == 5  # a quarter of the 8 demo images, 5 noise levels
    started = next(e for e in runs[0] if isinstance(e, RunStarted))
    assert started.num_images == 6  # the held-out images do not train
    # Every step event of a step comes before its validation event.
    order = [(e.type, e.step) for e in runs[0] if isinstance(e, Step | Validation)]
    assert order.index(("step", 2)) < order.index(("validation", 2))


def test_the_outcome_line_names_the_validation_loss(make_config: Callable[..., TrainConfig], demo_data: Path,
                                                    run_training: Callable[..., tuple[int, Path]],
                                                    events_of: Callable[[Path], list[Event]],
                                                    tmp_path: Path) -> None:
    code, run_dir = run_training(_config(make_config, demo_data, latents="mean"), tmp_path)
    assert code == 0
    last = [e for e in events_of(run_dir) if isinstance(e, Validation)][-1]
    assert f"validation loss {last.loss:.4f}" in outcome_line(run_dir, 0)


def test_a_validation_folder_is_measured(make_config: Callable[..., TrainConfig], demo_data: Path,
                                         run_training: Callable[..., tuple[int, Path]],
                                         events_of: Callable[[Path], list[Event]], tmp_path: Path) -> None:
    config = make_config()
    data = config.model_dump()
    data["dataset"]["validation_folder"] = str(demo_data)
    data["training"].update(max_steps=1, validation_every=1)
    code, run_dir = run_training(TrainConfig.model_validate(data), tmp_path)
    assert code == 0
    found = [e for e in events_of(run_dir) if isinstance(e, Validation)]
    assert [(e.step, e.images) for e in found] == [(1, 8)]


def test_a_validation_loss_gone_nan_ends_the_run_with_the_nan_advice(
        make_config: Callable[..., TrainConfig], demo_data: Path, run_training: Callable[..., tuple[int, Path]],
        events_of: Callable[[Path], list[Event]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights gone NaN at a validation step: the run ended with a crash (its event could not be written)."""
    from studio.train.extras import validation

    monkeypatch.setattr(validation, "masked_mse", lambda *_args: torch.tensor(float("nan")))
    code, run_dir = run_training(_config(make_config, demo_data), tmp_path)
    events = events_of(run_dir)
    error = next(e for e in events if isinstance(e, Error))
    assert code == 1 and error.kind == "nan"
    assert error.message == "the validation loss became nan at step 2" and "learning_rate" in error.hint
    assert isinstance(events[-1], RunFinished) and events[-1].status == "failed"


def test_validation_needs_held_out_images() -> None:
    with pytest.raises(ValidationError, match="needs held-out images"):
        TrainConfig(model={"family": "sd15", "base": "x"}, training=TrainingSection(validation_every=5))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="cannot be combined with dataset"):
        TrainConfig(model={"family": "sd15", "base": "x"},  # type: ignore[arg-type]
                    dataset=DatasetSection(validation_fraction=0.1, validation_folder="x"))
    # Images held out (or named) for a validation loss that is never measured: refused, not left out silently.
    with pytest.raises(ValidationError, match="never measured") as raised:
        TrainConfig(model={"family": "sd15", "base": "x"}, dataset=DatasetSection(validation_fraction=0.1))  # type: ignore[arg-type]
    assert "set training.validation_every (e.g. 100) or set dataset.validation_fraction back to 0" in str(raised.value)
    with pytest.raises(ValidationError, match="never measured"):
        TrainConfig(model={"family": "sd15", "base": "x"}, dataset=DatasetSection(validation_folder="held"))  # type: ignore[arg-type]


@pytest.mark.parametrize("family", ["sdxl", "sd3"])
def test_every_objective_measures_a_validation_loss(family: str, make_config: Callable[..., TrainConfig],
                                                    run_training: Callable[..., tuple[int, Path]],
                                                    events_of: Callable[[Path], list[Event]], tmp_path: Path) -> None:
    config = make_config(family)
    data = config.model_dump()
    data["dataset"]["validation_fraction"] = 0.25
    data["training"].update(max_steps=1, validation_every=1)
    code, run_dir = run_training(TrainConfig.model_validate(data), tmp_path)
    assert code == 0
    found = [e for e in events_of(run_dir) if isinstance(e, Validation)]
    assert len(found) == 1 and found[0].loss > 0 and found[0].images == 2


def test_a_share_that_leaves_no_image_to_train_on_says_what_is_allowed(tmp_path: Path) -> None:
    from studio.train.data.items import TrainItem
    from studio.train.errors import TrainError
    from studio.train.extras.validation import split_items

    items = [TrainItem(i, tmp_path / f"{i:02}.png", "x", 1, (64, 64), (64, 64)) for i in range(24)]
    config = TrainConfig(model={"family": "sd15", "base": "x"},  # type: ignore[arg-type]
                         dataset=DatasetSection(validation_fraction=0.99),
                         training=TrainingSection(validation_every=1))
    with pytest.raises(TrainError) as raised:
        split_items(items, config, print)
    assert raised.value.message == ("dataset.validation_fraction = 0.99 holds out 24 of the 24 training images, "
                                    "leaving none to train on")
    assert raised.value.hint.startswith("lower dataset.validation_fraction: allowed with 24 images: 0 (none held "
                                        "out) up to 0.97 (holds out 23)")
    config.dataset.validation_fraction = 0.97
    kept, held = split_items(items, config, print)
    assert (len(kept), len(held)) == (1, 23)


def test_a_validation_folder_inside_the_image_folder_is_not_trained_on(tmp_path: Path) -> None:
    # images/ with its val/ subfolder named as dataset.validation_folder: the concept walks into val/, so
    # the validation loss was measured on images the run had trained on.
    from studio.core.config.schema import ConceptSection
    from studio.core.dataset.demo_shapes import write_demo_dataset
    from studio.train.data.items import collect_items
    from studio.train.extras.validation import split_items

    write_demo_dataset(tmp_path / "images", count=4, size=32, seed=1)
    write_demo_dataset(tmp_path / "images" / "val", count=2, size=32, seed=2)
    config = TrainConfig(model={"family": "sd15", "base": "x"},  # type: ignore[arg-type]
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(tmp_path / "images"))],
                                                resolution=64, validation_folder=str(tmp_path / "images" / "val")),
                         training=TrainingSection(validation_every=1))
    warnings: list[str] = []
    items = collect_items(config, lambda message, path, hint: warnings.append(message))
    assert len(items) == 6
    kept, held = split_items(items, config, lambda message, path, hint: warnings.append(message))
    assert {i.path.parent.name for i in kept} == {"images"} and len(kept) == 4
    assert {i.path.parent.name for i in held} == {"val"} and len(held) == 2
    assert [i.index for i in kept] == [0, 1, 2, 3]
    assert any("2 images of dataset.validation_folder" in m for m in warnings)
    # The image folder itself: it trains on them all, and says what the loss measures.
    config.dataset.validation_folder = str(tmp_path / "images")
    warnings.clear()
    kept, held = split_items(items, config, lambda message, path, hint: warnings.append(message))
    assert (len(kept), len(held)) == (6, 6)
    assert any("measures images the run trains on" in m for m in warnings)
