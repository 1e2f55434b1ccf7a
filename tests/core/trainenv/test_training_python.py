"""Which Python trains when the config names none: the studio's environment once it is
complete, else this interpreter; the frozen app asks for the environment instead."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import validate_data
from studio.core.runs.launch import prepare_run, training_python
from studio.core.training_python import (
    READY_FILE,
    NoTrainingPython,
    env_dir,
    env_python,
    needs_training_env,
    pins_stamp,
)

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


def test_the_frozen_app_updated_into_another_folder_or_with_new_pins_brings_the_environment_up_to_date_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(tmp_path / "env"))
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    old_app, new_app = tmp_path / "studio-1.0" / "_internal", tmp_path / "studio-1.1" / "_internal"
    for app, pin in ((old_app, "torch==2.12.0"), (new_app, "torch==2.13.0")):
        (app / "constraints").mkdir(parents=True)
        (app / "constraints" / "ci.txt").write_text(pin + "\n")
    make_env(tmp_path / "env", ready=True)
    assert not needs_training_env(None)  # made before the install recorded its app: used as it is

    def made_by(app: Path) -> None:
        ready = {"stamp": "s", "studio_source": str(app), "pins": pins_stamp(app / "constraints" / "ci.txt")}
        (tmp_path / "env" / READY_FILE).write_text(json.dumps(ready))

    monkeypatch.setattr(sys, "_MEIPASS", str(new_app), raising=False)
    made_by(old_app)  # the old version's trainer and packages
    assert needs_training_env(None)
    assert not needs_training_env("/opt/py/bin/python")  # a Python of the person's own is theirs
    made_by(new_app)
    assert not needs_training_env(None)
    (new_app / "constraints" / "ci.txt").write_text("torch==2.14.0\n")  # updated in place, with new pins
    assert needs_training_env(None)
