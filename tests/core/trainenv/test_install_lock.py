"""One install at a time: a second studio window (or `studio-train env install`) that presses Install while
the first is making the environment is told so, and touches nothing of the environment being made."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from studio.core.files import try_lock, unlock
from studio.core.hardware.report import GPUInfo, HardwareReport
from studio.core.trainenv.installer import LOCK_SUFFIX, install
from studio.core.trainenv.plan import make_plan
from studio.core.trainenv.state import STATE_FILE, EnvState, write_state
from studio.core.trainenv.steps import StepFailed
from studio.core.trainenv.tools import EnvTool


def test_a_second_install_while_the_first_runs_is_refused_and_leaves_the_environment_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    machine = HardwareReport(gpus=[GPUInfo(0, "NVIDIA GeForce RTX 4090", 24564, 24000, driver="570.1", cuda="12.8")])
    plan = make_plan(tmp_path / "training-env", "venv", None, None, machine)
    # A Python that cannot start: were the install to go on, it would fail at once instead of making a venv.
    plan = replace(plan, tool=EnvTool("venv", str(tmp_path / "no-python"), str(tmp_path / "no-python")))
    # The first install has made the folder and is busy with torch.
    plan.folder.mkdir()
    write_state(plan.folder, EnvState(plan.stamp(), ["create"], plan.build.tag, plan.tool.kind))
    (plan.folder / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    fd = os.open(tmp_path / ("training-env" + LOCK_SUFFIX), os.O_RDWR | os.O_CREAT)
    assert try_lock(fd)
    try:
        with pytest.raises(StepFailed, match=r"another studio window .* is installing the training environment"):
            install(plan)
    finally:
        unlock(fd)
        os.close(fd)
    assert (plan.folder / STATE_FILE).is_file() and (plan.folder / "pyvenv.cfg").is_file()
    # Once the first has finished, an install goes on (here: to the Python that cannot start).
    with pytest.raises(StepFailed, match="could not start"):
        install(plan)
