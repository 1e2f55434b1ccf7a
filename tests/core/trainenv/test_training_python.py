"""Which Python trains when the config names none: the studio's environment once it is
complete, else this interpreter; the frozen app asks for the environment instead."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import validate_data
from studio.core.runs.launch import prepare_run, training_python
from studio.core.training_python import READY_FILE, NoTrainingPython, env_dir, env_python

CONFIG = {"model": {"family": "sd15", "base": "models/m"}}


def make_env(folder: Path, ready: bool) -> Path:
    python = env_python(folder)
    python.parent.mkdir(parents=True)
    python.write_text("")
    if ready:
        (folder / READY_FILE).write_text("{}")
    return python


def test_the_environment_lives_in_the_user_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path / "data"))
    assert env_dir() == tmp_path / "data" / "training-env"
    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(tmp_path / "elsewhere"))
    assert env_dir() == tmp_path / "elsewhere"


def test_a_complete_environment_is_the_default_and_launch_python_still_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(tmp_path / "env"))
    config = validate_data(CONFIG)
    assert training_python(config) == sys.executable  # nothing set up yet: a source run uses its own
    python = make_env(tmp_path / "env", ready=False)
    assert training_python(config) == sys.executable  # an unfinished install is not used
    (tmp_path / "env" / READY_FILE).write_text("{}")
    assert training_python(config) == str(python)
    assert prepare_run(resolve_paths(config, tmp_path)).command[0] == str(python)
    assert training_python(validate_data({**CONFIG, "launch": {"python": "/opt/py/bin/python"}})) == "/opt/py/bin/python"


def test_the_frozen_app_without_an_environment_says_how_to_get_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(tmp_path / "env"))
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with pytest.raises(NoTrainingPython, match="Tools → Training Environment"):
        training_python(validate_data(CONFIG))
    python = make_env(tmp_path / "env", ready=True)
    assert training_python(validate_data(CONFIG)) == str(python)
