"""The desktop app ships no `studio-train`: every message the window shows names the window's action there
(or, for a route only the command line has, the command through the training environment's Python)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from studio.core.app_words import DESKTOP_APP_ENV, cli_command, desktop_app_env, in_desktop_app
from studio.core.config.rules.pickled import pickle_refusal
from studio.core.config.schema import LaunchSection, ModelSection, TrainConfig
from studio.core.dataset.captions.captioner_models import CaptionerNotFound, find_captioner
from studio.core.hardware.machine.probe import load_profile
from studio.core.project.preflight import check_gpu_count, check_model
from studio.core.remote.machines import MachineError, get_machine
from studio.core.runs.records.outcome import outcome_line
from studio.core.trainenv import doctor


def _messages(tmp_path: Path) -> dict[str, str]:
    """What the window shows in each place that used to name a `studio-train` command."""
    said: dict[str, str] = {}
    model = ModelSection(family="sd15", base="someone/not-downloaded-model")
    hub = check_model(TrainConfig(model=model))
    said["train: base not downloaded"] = hub.message if hub else ""
    config = TrainConfig(model=model, launch=LaunchSection(num_processes=4))
    gpus = check_gpu_count(config, 1)
    said["train: more processes than GPUs"] = gpus.message if gpus else ""
    (tmp_path / "run").mkdir()
    said["train page: the trainer ended"] = outcome_line(tmp_path / "run", 1)
    said["model page: a pickle file"] = pickle_refusal(str(tmp_path / "model.ckpt"))
    with pytest.raises(CaptionerNotFound) as missing:
        find_captioner("wd14-vit-v3")
    said["dataset page: captioner not downloaded"] = str(missing.value)
    with pytest.raises(MachineError) as unknown:
        get_machine("gpu-box")
    said["export page: unknown machine"] = str(unknown.value)
    found = doctor.diagnose(load_profile("no-gpu"), tmp_path / "new-env", tool_kind="venv")
    said["training environment: not installed"] = next(f.fix for f in found if f.code == "not_installed")
    return said


@pytest.fixture
def desktop_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.delenv(DESKTOP_APP_ENV, raising=False)


def test_the_desktop_app_shows_no_studio_train_command(desktop_app: None, tmp_path: Path) -> None:
    said = _messages(tmp_path)
    assert {place: text for place, text in said.items() if "studio-train" in text or not text} == {}
    # Once named "the Download button on the Model & Preset page", which the page does not have.
    assert said["train: base not downloaded"] == ("Base model someone/not-downloaded-model is no folder or file here "
                                                  "and no downloaded hub model: download it first: Train offers to; "
                                                  "or choose a model folder or file.")
    assert "Resume on the Train or Runs page" in said["train page: the trainer ended"]
    assert "export the run on the Export page" in said["train: more processes than GPUs"]
    assert "press Install in Tools → Training Environment" in said["training environment: not installed"]
    assert "-m studio.cli model model.ckpt --to-safetensors" in said["model page: a pickle file"]


def test_with_its_command_line_the_studio_still_names_the_commands(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.delenv(DESKTOP_APP_ENV, raising=False)
    said = _messages(tmp_path)
    assert all("studio-train" in text for text in said.values()), said


def test_a_process_the_desktop_app_starts_speaks_as_the_app(desktop_app: None, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    env = desktop_app_env()
    monkeypatch.setattr(sys, "frozen", False)  # the trainer: the training environment's Python
    assert not in_desktop_app()
    monkeypatch.setenv(*next(iter(env.items())))
    assert in_desktop_app()
    (tmp_path / "run").mkdir()
    assert "studio-train" not in outcome_line(tmp_path / "run", 1)
    assert cli_command(["cloud", "down", "c1"]).endswith("-m studio.cli cloud down c1` in a terminal") or \
        "Tools → Training Environment" in cli_command(["cloud", "down", "c1"])
