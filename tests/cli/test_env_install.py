"""`studio-train env`: a real training environment (venv, pip, the pinned package list) built
from a folder of stand-in wheels, so nothing is downloaded; cancelled, resumed, checked,
and broken on purpose so that `doctor` names each fault."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest
from fixtures.trainenv import Installed

from studio.cli import main
from studio.core.config.files.toml_file import validate_data
from studio.core.hardware.machine.probe import load_profile
from studio.core.runs.launch import training_python
from studio.core.trainenv import doctor
from studio.core.trainenv.installer import install, steps_to_run
from studio.core.trainenv.state import PTH_FILE, STATE_FILE, check_env, read_state
from studio.core.training_python import READY_FILE, env_python, made_for_this_app

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # runs pip in a new virtual environment (about 10 s)


@pytest.fixture
def installed(trainenv_installed: Installed) -> Installed:
    return trainenv_installed


def test_a_cancelled_install_keeps_what_finished_and_continues_there(installed: Installed) -> None:
    assert installed.cancelled_at == "packages"
    assert installed.steps_after_cancel == ["create", "torch"]
    assert "install_unfinished" in installed.findings_after_cancel
    assert installed.resumed_steps == ["packages", "link", "verify"]
    seen = [(p.index, p.step) for p in installed.progress]
    assert seen[0] == (3, "packages") and seen[-1] == (5, "verify")
    assert {"diffusers", "peft", "pydantic"} <= {p.package for p in installed.progress}


def test_the_environment_runs_the_pinned_packages_and_this_studio(installed: Installed) -> None:
    folder = installed.plan.folder
    ready = json.loads((folder / READY_FILE).read_text())
    assert ready["torch"] == "2.13.0+cpu" and ready["torch_build"] == "cpu" and ready["cuda_available"] is False
    check = check_env(folder, ["torch", "diffusers", "transformers"])
    assert check.versions == {"torch": "2.13.0+cpu", "diffusers": "0.42.1", "transformers": "5.23.0"}
    assert Path(check.studio or "").resolve() == ROOT / "studio"
    assert (Path(check.purelib or "") / PTH_FILE).read_text().strip() == str(ROOT)
    # The app it links and the pins it holds: the app after an update knows whether it is still its own.
    assert ready["studio_source"] == str(ROOT) and ready["pins"] and made_for_this_app(folder)


def test_a_second_install_with_nothing_changed_runs_nothing(installed: Installed) -> None:
    log = installed.plan.folder / "install.log"
    before = log.stat().st_size
    result = install(installed.plan)
    assert result.up_to_date and result.steps_run == []
    assert log.stat().st_size == before  # pip was not run


def test_the_studio_trains_with_it_by_default(installed: Installed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(installed.plan.folder))
    assert training_python(validate_data({"model": {"family": "sd15", "base": "m/n"}})) == str(
        env_python(installed.plan.folder))


def test_cli_status_and_doctor_say_it_is_ready(installed: Installed, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--folder", str(installed.plan.folder), "--wheelhouse", str(installed.wheels), "--tool", "venv",
            "--hardware", "no-gpu", "--json"]
    assert main(["env", "status", *args]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["ready"] and status["up_to_date"] and status["torch"] == "2.13.0+cpu"
    assert main(["env", "doctor", *args]) == 0  # only a warning: no NVIDIA GPU on this machine
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["code"], f["severity"]) for f in findings] == [("no_nvidia_driver", "warning")]
    assert main(["env", "install", *args]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["up_to_date"] is True


def _codes(installed: Installed, profile: str = "no-gpu") -> dict[str, str]:
    found = doctor.diagnose(load_profile(profile), installed.plan.folder, wheelhouse=installed.wheels,
                            tool_kind="venv")
    return {f.code: f"{f.message} | {f.fix}" for f in found}


def _planted(installed: Installed, plant: Callable[[Path], Callable[[], None]], profile: str = "no-gpu") -> dict[str, str]:
    undo = plant(installed.plan.folder)
    try:
        return _codes(installed, profile)
    finally:
        undo()


def _rename(path: Path, to: Path) -> Callable[[], None]:
    path.rename(to)
    return lambda: to.rename(path)


def test_doctor_names_a_missing_package(installed: Installed) -> None:
    def plant(folder: Path) -> Callable[[], None]:
        info = next(folder.glob("lib*/**/site-packages/diffusers-*.dist-info"), None) or next(
            folder.glob("Lib/site-packages/diffusers-*.dist-info"))
        return _rename(info, info.with_name("hidden"))

    found = _planted(installed, plant)
    assert "diffusers is not installed" in found["packages"]
    assert "studio-train env repair" in found["packages"]


def test_doctor_names_a_venv_whose_python_does_not_run(installed: Installed) -> None:
    found = _planted(installed, lambda folder: _rename(env_python(folder), env_python(folder).with_name("gone")))
    assert list(found) == ["no_nvidia_driver", "broken_venv"]
    assert "does not run" in found["broken_venv"] and "makes the environment again" in found["broken_venv"]


def test_doctor_names_an_unlinked_studio(installed: Installed) -> None:
    pth = Path(check_env(installed.plan.folder, []).purelib or "") / PTH_FILE

    def plant(_folder: Path) -> Callable[[], None]:
        text = pth.read_text()
        pth.write_text("/moved/away\n")
        return lambda: pth.write_text(text)

    found = _planted(installed, plant)
    assert f"does not run this studio's code from {ROOT}" in found["studio_unlinked"]
    assert steps_to_run(installed.plan) == []  # undone: nothing left to do


def test_doctor_names_a_driver_too_old_and_a_build_that_no_longer_fits(installed: Installed, tmp_path: Path) -> None:
    old = _codes(installed, "rtx4090-24gb")
    assert "update the NVIDIA driver to 560.28 or newer" in old["driver_too_old"]
    profile = json.loads((ROOT / "resources/hardware/rtx4090-24gb.json").read_text())
    profile["gpus"][0].update(driver="575.51.03", cuda="12.9")
    (tmp_path / "new-driver.json").write_text(json.dumps(profile))
    new = _codes(installed, str(tmp_path / "new-driver.json"))
    assert "driver_too_old" not in new and "no_nvidia_driver" not in new
    assert "torch is the cpu build, this machine needs the cu128 build" in new["packages"]


def test_doctor_names_too_little_disk_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda _p: usage._replace(free=2 * 10**9))
    found = {f.code: f for f in doctor.diagnose(load_profile("no-gpu"), tmp_path / "new-env", tool_kind="venv")}
    assert found["disk_space"].message.startswith("2.0 GB free on the disk of")
    assert "needs about 4 GB" in found["disk_space"].message
    assert "STUDIO_TRAINING_ENV" in found["disk_space"].fix
    assert found["not_installed"].severity == "info"


def test_install_refuses_a_folder_that_is_not_an_environment(tmp_path: Path, installed: Installed,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    keep = tmp_path / "my-files"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    code = main(["env", "install", "--folder", str(keep), "--wheelhouse", str(installed.wheels), "--tool", "venv",
                 "--hardware", "no-gpu"])
    assert code == 1
    assert "is not a training environment the studio made" in capsys.readouterr().err
    assert (keep / "notes.txt").read_text() == "mine"
    assert not (keep / STATE_FILE).exists()


def test_stand_in_wheels_are_what_pip_installed(installed: Installed) -> None:
    # The machine's own pip configuration (extra indexes, find-links) never leaks into an offline install.
    log = (installed.plan.folder / "install.log").read_text().splitlines()
    looked = {line for line in log if line.startswith("Looking in")}
    assert looked == {f"Looking in links: {installed.wheels}"}
    assert asdict(read_state(installed.plan.folder))["steps_done"] == ["create", "torch", "packages", "link", "verify"]
