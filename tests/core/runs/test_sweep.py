"""A sweep: one config written as N configs that differ in one setting. Each value is one run (the same
number written twice is refused, naming both), and each sweep's files live in a folder of their own, so a
second sweep never rewrites the configs the first one queued."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.files.toml_file import load_config, save_config, validate_data
from studio.core.runs.scheduling.sweep import SweepError, parse_values, write_sweep


def _config(path: Path, batch_size: int) -> Path:
    data = {"model": {"family": "sd15", "base": "models/tiny-sd15"},
            "dataset": {"concepts": [{"path": "images"}]},
            "training": {"batch_size": batch_size, "max_steps": 10},
            "output": {"name": "cat"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_config(validate_data(data), path)
    return path


def test_the_same_number_written_twice_is_refused_naming_both() -> None:
    with pytest.raises(SweepError, match=r"1e-4 and 0\.0001 are the same value \(0\.0001\): a sweep runs each "
                                         r"value once; remove one of them"):
        parse_values("1e-4, 5e-5, 0.0001")
    with pytest.raises(SweepError, match=r"1 and 1\.0 are the same value"):
        parse_values("1, 2, 1.0")
    with pytest.raises(SweepError, match="starts and ends at the same value"):
        parse_values("1e-4..1e-4 log3")
    assert parse_values("1e-4, 5e-5") == [1e-4, 5e-5]


def test_write_sweep_refuses_values_that_would_be_one_file(tmp_path: Path) -> None:
    base = _config(tmp_path / "base.toml", 4)
    with pytest.raises(SweepError, match="are the same value"):
        write_sweep(base, "training.learning_rate", [1e-4, 0.0001])
    with pytest.raises(SweepError, match=r"would be one run named '0\.0001'"):
        write_sweep(base, "training.learning_rate", [1e-4, 1.0000001e-4])
    assert not (tmp_path / "sweeps").exists() or not any((tmp_path / "sweeps").rglob("*.toml"))


def test_a_second_sweep_never_rewrites_the_first_ones_configs(tmp_path: Path) -> None:
    first = _config(tmp_path / "a.toml", 4)
    second = _config(tmp_path / "b.toml", 1)  # the same run name, in the same folder
    one = write_sweep(first, "training.learning_rate", parse_values("1e-4, 5e-5"))
    two = write_sweep(second, "training.learning_rate", parse_values("1e-4, 5e-5"))
    assert [p.name for p in one] == [p.name for p in two] == ["learning_rate-0.0001.toml", "learning_rate-5e-05.toml"]
    assert one[0].parent.name == "cat-learning_rate" and two[0].parent.name == "cat-learning_rate-2"
    assert [load_config(p).training.batch_size for p in one] == [4, 4]
    assert [load_config(p).training.batch_size for p in two] == [1, 1]
    again = write_sweep(first, "training.learning_rate", parse_values("1e-4, 5e-5"))
    assert again[0].parent.name == "cat-learning_rate-3" and set(one).isdisjoint(again)


def test_max_steps_swept_over_a_run_in_epochs_sets_the_length_in_steps(tmp_path: Path) -> None:
    # A run in epochs (as the LoRA presets are) swept over max_steps: each config counts in steps alone.
    data = {"model": {"family": "sd15", "base": "models/tiny-sd15"}, "dataset": {"concepts": [{"path": "images"}]},
            "training": {"epochs": 10}, "output": {"name": "cat"}}
    path = tmp_path / "base.toml"
    save_config(validate_data(data), path)
    written = write_sweep(path, "training.max_steps", [500, 1000])
    assert [(load_config(p).training.max_steps, load_config(p).training.epochs) for p in written] == [
        (500, None), (1000, None)]


def test_a_large_number_written_with_an_exponent_names_its_run_in_the_characters_a_run_name_takes(
        tmp_path: Path) -> None:
    # 1e6 is written 1e+06, and a run name takes no '+': the sweep was refused over output.name, which the person
    # never wrote.
    base = _config(tmp_path / "base.toml", 4)
    written = write_sweep(base, "training.max_steps", parse_values("5e5, 1e6"))
    assert [p.name for p in written] == ["max_steps-500000.toml", "max_steps-1e06.toml"]
    assert [(load_config(p).output.name, load_config(p).training.max_steps) for p in written] == [
        ("cat-max_steps-500000", 500000), ("cat-max_steps-1e06", 1000000)]


def test_a_sweep_over_the_batch_trains_each_batch_where_the_card_would_be_filled(tmp_path: Path) -> None:
    from studio.core.config.files.paths import load_resolved
    from studio.core.estimate.plans.card_fill import fill_card
    from studio.core.hardware.machine.probe import load_hardware

    data = {"model": {"family": "sdxl", "base": "models/tiny"}, "dataset": {"concepts": [{"path": "images"}]},
            "training": {"batch_size": 1, "max_steps": 100, "fill_card": True, "mixed_precision": "bf16",
                         "cache_latents": True, "cache_text_embeddings": True},
            "output": {"name": "cat"}}
    path = tmp_path / "base.toml"
    save_config(validate_data(data), path)
    card = load_hardware("a100-80gb").gpus[0]
    assert fill_card(load_resolved(path), card).config.training.batch_size > 4  # the base fills the card
    written = write_sweep(path, "training.batch_size", [1, 2, 4])
    # Each run starts at its own batch (fill_card made all three the one batch that fills the card).
    assert [fill_card(load_resolved(p), card).config.training.batch_size for p in written] == [1, 2, 4]
    assert all(load_config(p).training.fill_card is False for p in written)
    other = write_sweep(path, "training.learning_rate", [1e-4, 5e-5])  # a sweep over anything else keeps it
    assert all(load_config(p).training.fill_card for p in other)


def test_a_list_with_a_comma_too_many_says_so() -> None:
    # Three values and a comma at the end were refused as "fewer than two values".
    with pytest.raises(SweepError, match=r"^'1e-4, 5e-5, 1e-5,' has an empty value \(a comma at the end, or two "
                                         r"commas in a row\): remove the extra comma$"):
        parse_values("1e-4, 5e-5, 1e-5,")
    with pytest.raises(SweepError, match="has an empty value"):
        parse_values("4,, 8")
    with pytest.raises(SweepError, match="names fewer than two values"):
        parse_values("1e-4,")
