"""`dev.py`'s set-up, decided without installing anything: the Python it needs, the torch build for
this machine (the desktop app's table), the constraints on every step, and a .venv of another Python."""

from __future__ import annotations

import glob
import importlib.util
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = (ROOT / "constraints" / "ci.txt").read_text(encoding="utf-8")
BUILDS = tomllib.loads((ROOT / "resources" / "trainenv" / "torch_builds.toml").read_text(encoding="utf-8"))
NVIDIA_SMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 575.57.08              Driver Version: 575.57.08      CUDA Version: 12.9     |
|-----------------------------------------+------------------------+----------------------+
"""


@pytest.fixture(scope="module")
def dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_setup", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def torch_wheel(step: tuple[str, ...]) -> str:
    return next(arg for arg in step if arg.startswith("torch=="))


def test_without_a_driver_linux_and_windows_get_the_cpu_build(dev: ModuleType) -> None:
    version = dev.pinned_torch(CONSTRAINTS)
    for platform in ("linux", "win32"):
        plan = dev.install_plan("gui,train", platform, None, CONSTRAINTS, BUILDS)
        assert plan.torch_build == "cpu"
        for step in plan.steps:
            # The local version +cpu: PyPI's Linux wheel (the CUDA build, 2.7 GB with its libraries) cannot match.
            assert torch_wheel(step.requirements) == f"torch=={version}+cpu"
            assert "--extra-index-url" in step.requirements and f"{BUILDS['index']}/cpu" in step.requirements
            index = step.requirements.index("-c")
            assert step.requirements[index + 1] == str(ROOT / "constraints" / "ci.txt")
        assert plan.steps[-1].requirements[-2:] == ("-e", ".[gui,train]")


def test_with_a_driver_the_driver_matched_build_and_the_constraints(dev: ModuleType) -> None:
    cuda = dev.driver_cuda(NVIDIA_SMI)
    assert cuda == "12.9"
    plan = dev.install_plan("gui,train", "linux", cuda, CONSTRAINTS, BUILDS)
    assert plan.torch_build == "cu128"  # 12.9 runs the 12.8 build, not the 13.0 one
    for step in plan.steps:
        assert torch_wheel(step.requirements) == f"torch=={dev.pinned_torch(CONSTRAINTS)}+cu128"
        assert f"{BUILDS['index']}/cu128" in step.requirements
        index = step.requirements.index("-c")
        assert step.requirements[index + 1] == str(ROOT / "constraints" / "ci.txt")
    assert dev.install_plan("", "linux", "13.1", CONSTRAINTS, BUILDS).torch_build == "cu130"
    old = dev.install_plan("", "linux", "11.8", CONSTRAINTS, BUILDS)
    assert old.torch_build == "cpu" and "older than every build" in old.reason
    assert dev.driver_cuda("") is None


def test_macos_and_a_chosen_torch_and_no_pytorch_index(dev: ModuleType) -> None:
    mac = dev.install_plan("gui,train", "darwin", None, CONSTRAINTS, BUILDS)
    assert mac.steps[0].requirements[0] == f"torch=={dev.pinned_torch(CONSTRAINTS)}"
    assert "--extra-index-url" not in mac.steps[0].requirements
    chosen = dev.install_plan("gui", "linux", "12.9", CONSTRAINTS, BUILDS, choice="torch==2.12.0")
    assert chosen.steps[0].requirements[0] == "torch==2.12.0" and "-c" in chosen.steps[0].requirements
    offline = dev.install_plan("gui", "linux", None, CONSTRAINTS, BUILDS, torch_index=False)
    assert "--extra-index-url" not in offline.steps[0].requirements  # the person's own sources give it


def _old_python() -> str | None:
    found = shutil.which("python3.10") or shutil.which("python3.9")
    candidates = [found] if found else []
    candidates += sorted(glob.glob("/root/.pyenv/versions/3.10*/bin/python3"))
    for candidate in candidates:
        try:
            out = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2] < (3, 11))"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.stdout.strip() == "True":
            return candidate
    return None


def test_an_older_python_stops_at_once_naming_the_versions_needed(tmp_path: Path) -> None:
    python = _old_python()
    if python is None:
        pytest.skip("no Python older than 3.11 on this machine")
    started = time.monotonic()
    out = subprocess.run([python, str(ROOT / "dev.py"), "run"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert time.monotonic() - started < 2.0
    assert out.returncode == 1 and out.stdout == ""
    assert "dev.py needs Python 3.11 or newer (3.11, 3.12 or 3.13); this is Python 3." in out.stderr
    assert not (tmp_path / ".venv").exists()


def test_a_venv_made_by_another_python_is_made_again(dev: ModuleType, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    env = tmp_path / ".venv"
    (env / "lib" / "python3.10" / "site-packages").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.10.12\n")
    created: list[Path] = []
    installed: list[list[str]] = []

    class FakeBuilder:
        def __init__(self, **_kwargs: object) -> None:
            pass

        def create(self, folder: Path) -> None:
            created.append(folder)
            dev.python_of(folder).parent.mkdir(parents=True, exist_ok=True)
            dev.python_of(folder).write_text("")

    monkeypatch.setattr(dev.venv, "EnvBuilder", FakeBuilder)
    monkeypatch.setattr(dev, "uv_command", lambda _python: None)
    monkeypatch.setattr(dev, "install", lambda _python, requirements, _uv: installed.append(list(requirements)))
    dev.ensure_env(env, "gui", "studio")
    assert created == [env] and not (env / "lib" / "python3.10").exists()
    assert installed == [["-c", str(ROOT / "constraints" / "ci.txt"), "-e", ".[gui]"]]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f".venv/ was made by Python 3.10; making it again with Python {sys.version_info[0]}." \
                       f"{sys.version_info[1]}."
    assert [line.split("]")[0] for line in lines[1:4]] == ["[1/3", "[2/3", "[3/3"]
    assert lines[-1].startswith("The studio environment is ready (")



@pytest.mark.parametrize("studio_has_uv", [True, False])
def test_the_test_environments_use_the_studio_environments_uv_and_need_no_pip(
        dev: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, studio_has_uv: bool) -> None:
    made: list[tuple[Path, bool]] = []
    installed: list[tuple[list[object], object]] = []

    class FakeBuilder:
        def __init__(self, with_pip: bool, clear: bool) -> None:
            self.with_pip = with_pip

        def create(self, folder: Path) -> None:
            made.append((folder, self.with_pip))
            dev.python_of(folder).parent.mkdir(parents=True, exist_ok=True)
            dev.python_of(folder).write_text("")

    studio_uv = [Path("studio-python"), "-m", "uv"]
    monkeypatch.setattr(dev.venv, "EnvBuilder", FakeBuilder)
    monkeypatch.setattr(dev, "studio_uv", lambda: studio_uv if studio_has_uv else None)
    monkeypatch.setattr(dev, "uv_command", lambda python: [python, "-m", "uv"])  # pip installs uv into it
    monkeypatch.setattr(dev, "install", lambda _python, requirements, uv: installed.append((list(requirements), uv)))
    for name in ("CORE_VENV", "CLOUD_VENV", "COMPAT_VENV"):
        monkeypatch.setattr(dev, name, tmp_path / name.lower())
    dev.setup_core(), dev.setup_cloud(), dev.setup_compat()
    folders = [tmp_path / "core_venv", tmp_path / "cloud_venv", tmp_path / "compat_venv"]
    # With the studio environment's uv: made without pip, installed by that uv. Without it: pip, and uv through pip.
    assert made == [(folder, not studio_has_uv) for folder in folders]
    assert [uv for _requirements, uv in installed] == (
        [studio_uv] * 3 if studio_has_uv else [[dev.python_of(folder), "-m", "uv"] for folder in folders])
    assert installed[1][0] == ["-c", dev.CLOUD_CONSTRAINTS, "skypilot"]


def test_mypy_keeps_its_cache_beside_uvs_for_every_checkout(dev: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.delenv("MYPY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "cache"))
    assert dev.mypy_cache() == tmp_path / "cache" / "sd-training-studio" / "mypy"
    assert not str(dev.mypy_cache()).startswith(str(ROOT))  # not in the checkout: a new clone finds it
    monkeypatch.setenv("MYPY_CACHE_DIR", str(tmp_path / "mine"))
    assert dev.mypy_cache() == tmp_path / "mine"
