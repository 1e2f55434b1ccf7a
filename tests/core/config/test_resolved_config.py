"""The one way a config's paths are made absolute: `resolve_paths` makes a ResolvedConfig, or says
which field, which value and what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import NO_FOLDER, ResolvedConfig, resolve_paths
from studio.core.config.files.toml_file import save_config, validate_data
from studio.core.estimate.plans.fixes import apply_changes

DATA = {"model": {"family": "sd15", "base": "models/tiny-sd15"}, "dataset": {"concepts": [{"path": "images"}]}}


def test_a_resolved_config_knows_its_folder_and_keeps_it_through_changes(tmp_path: Path) -> None:
    (tmp_path / "models" / "tiny-sd15").mkdir(parents=True)
    config = validate_data(DATA)
    resolved = resolve_paths(config, tmp_path)
    assert isinstance(resolved, ResolvedConfig) and resolved.base_dir == tmp_path
    assert resolved.model.base == str(tmp_path / "models" / "tiny-sd15")
    assert resolved.dataset.concepts[0].path == str(tmp_path / "images")
    assert config.dataset.concepts[0].path == "images"  # the person's config is left as written
    changed = apply_changes(resolved, {"training.batch_size": 4})
    assert isinstance(changed, ResolvedConfig) and changed.base_dir == tmp_path
    assert (changed.training.batch_size, changed.dataset.concepts[0].path) == (4, str(tmp_path / "images"))
    assert type(apply_changes(config, {"training.batch_size": 4})) is not ResolvedConfig
    copied = resolved.model_copy(deep=True)
    assert copied.base_dir == tmp_path and copied == resolved
    # Saved, it is an ordinary config file with absolute paths (a sweep's, a run folder's).
    save_config(resolved, tmp_path / "saved.toml")
    text = (tmp_path / "saved.toml").read_text(encoding="utf-8")
    assert str(tmp_path / "images") in text and "base_dir" not in text


def test_a_change_to_a_path_is_resolved_against_the_same_folder(tmp_path: Path) -> None:
    resolved = resolve_paths(validate_data(DATA), tmp_path)
    moved = resolved.varied(apply_changes(validate_data(DATA), {"output.dir": "elsewhere/runs"}))
    assert moved.output.dir == str(tmp_path / "elsewhere" / "runs") and moved.base_dir == tmp_path
    same = resolved.varied(apply_changes(resolved, {"training.epochs": 3}))
    assert same.output.dir == resolved.output.dir and same.training.epochs == 3


def test_resolving_twice_changes_nothing(tmp_path: Path) -> None:
    once = resolve_paths(validate_data(DATA), tmp_path)
    assert resolve_paths(once, tmp_path / "elsewhere").model_dump() == once.model_dump()


def test_a_config_in_no_folder_names_nothing_on_this_machine() -> None:
    resolved = resolve_paths(validate_data(DATA), NO_FOLDER)
    assert not NO_FOLDER.exists()
    assert resolved.dataset.concepts[0].path == str(NO_FOLDER / "images")
    assert resolved.model.base == "models/tiny-sd15"  # no such folder there: a hub id it may be


def test_a_resolved_config_made_by_hand_says_how_to_make_one() -> None:
    with pytest.raises(TypeError, match="resolve_paths"):
        _ = ResolvedConfig.model_validate(DATA).base_dir


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_a_path_that_cannot_be_resolved_names_the_field_its_value_and_what_to_do(tmp_path: Path) -> None:
    folder = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9")))
    with pytest.raises(ConfigError) as caught:
        resolve_paths(validate_data(DATA), folder)
    (issue,) = caught.value.issues
    assert (issue.key, issue.value) == ("dataset.concepts[0].path", "images")
    assert "caf\\xe9" in issue.message and "not valid UTF-8" in issue.message and "rename the folder" in issue.message
    assert 'dataset.concepts[0].path = "images": resolves to' in caught.value.describe()


def test_a_run_folder_moved_with_its_project_reads_its_files_where_they_are_now(tmp_path: Path) -> None:
    """The project moved to another disk between Stop and Resume: the run's config.toml names the old place
    of its dataset and of launch.python's venv (the resume's launch refused that python as missing); a file
    outside the project that is still where it was stays as written."""
    from studio.core.config.files.paths import moved_with_its_run

    outside = tmp_path / "models" / "base.safetensors"
    outside.parent.mkdir()
    outside.write_bytes(b"")
    old, new = tmp_path / "D" / "project", tmp_path / "E" / "project 2"
    data = {"model": {"family": "sd15", "base": str(outside)}, "dataset": {"concepts": [{"path": "images"}]},
            "launch": {"python": "venv/bin/python"}, "output": {"dir": "runs"}}
    config = resolve_paths(validate_data(data), old)
    for made in ("images", "venv/bin/python", "runs/20260101-120000-run/checkpoints"):
        (new / made).parent.mkdir(parents=True, exist_ok=True)
        (new / made).mkdir() if made.endswith(("images", "checkpoints")) else (new / made).write_text("")
    moved, said = moved_with_its_run(config, new / "runs" / "20260101-120000-run")
    assert isinstance(moved, ResolvedConfig)
    assert moved.dataset.concepts[0].path == str(new / "images") and moved.launch.python == str(new / "venv/bin/python")
    assert moved.model.base == str(outside) and moved.output.dir == str(new / "runs")
    assert said == (f"the run folder moved with its project from {old} to {new}: 2 paths of its config.toml under the "
                    f"old folder are read under the new one ({old / 'images'} is {new / 'images'})")
    assert config.dataset.concepts[0].path == str(old / "images")  # the config read is left as it was
    assert moved_with_its_run(config, old / "runs" / "20260101-120000-run") == (config, "")  # not moved
