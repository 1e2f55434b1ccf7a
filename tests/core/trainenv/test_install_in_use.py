"""A Repair (or an install that would remake the environment) while a run trains with it is refused, naming the
run: its packages were replaced, or the whole folder removed, under the running trainer."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from studio.core.hardware.report import GPUInfo, HardwareReport
from studio.core.trainenv.installer import install
from studio.core.trainenv.plan import make_plan
from studio.core.trainenv.state import STATE_FILE, EnvState, write_state
from studio.core.trainenv.steps import StepFailed
from studio.core.trainenv.tools import EnvTool


@pytest.mark.skipif(sys.platform == "win32", reason="the environment's python is a link to this one here")
def test_a_repair_while_a_run_trains_with_the_environment_names_the_run_and_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    machine = HardwareReport(gpus=[GPUInfo(0, "NVIDIA GeForce RTX 4090", 24564, 24000, driver="570.1", cuda="12.8")])
    plan = make_plan(tmp_path / "training-env", "venv", None, None, machine)
    # A Python that cannot start: were the install to go on, it would fail at once instead of making a venv.
    plan = replace(plan, tool=EnvTool("venv", str(tmp_path / "no-python"), str(tmp_path / "no-python")))
    plan.folder.mkdir()
    write_state(plan.folder, EnvState(plan.stamp(), ["create", "torch", "packages"], plan.build.tag, plan.tool.kind))
    (plan.folder / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    (plan.folder / "bin").mkdir()
    (plan.folder / "bin" / "trainer-python").symlink_to(sys.executable)
    run = tmp_path / "project" / "runs" / "20261207-101500-cat-lora"
    trainer = subprocess.Popen(
        [str(plan.folder / "bin" / "trainer-python"), "-c", "import sys; print('training', flush=True); "
         "sys.stdin.read()", "--config_file", str(run / "accelerate.yaml")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout is not None and trainer.stdout.readline() == "training\n"
        with pytest.raises(StepFailed) as refused:
            install(plan, force=True)
        assert (f"the run 20261207-101500-cat-lora runs with the environment in {plan.folder} right now: wait "
                "until it ends (or stop it), then install again; nothing was changed") in str(refused.value)
    finally:
        assert trainer.stdin is not None
        trainer.stdin.close()
        trainer.wait(timeout=30)
        trainer.stdout.close()  # type: ignore[union-attr]
    # The environment the run trains with is as it was (the install would have removed the folder to remake it).
    assert (plan.folder / STATE_FILE).is_file() and (plan.folder / "pyvenv.cfg").is_file()
    # Once the run has ended, the install goes on (here: to the Python that cannot start).
    with pytest.raises(StepFailed, match="could not start"):
        install(plan, force=True)
