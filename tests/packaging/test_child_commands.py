"""Every child command the window starts, started as the desktop app starts it.

In the frozen app `sys.executable` is the window's own binary: `studio -m studio.cli …` is read as
the window's arguments and fails ("unrecognized arguments: -m"). Here the app's binary is a small
launcher that behaves as the frozen one does (it runs `studio/__main__.py` with `sys.frozen` set),
and the training environment is a ready folder whose python is this test's interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.fake_hub import FakeHub, tiny_sd15_repo

from studio.core.training_python import READY_FILE

pytestmark = pytest.mark.skipif(os.name == "nt", reason="the stand-in binary is a POSIX script")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def frozen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """sys.frozen and sys.executable as in the desktop app, with a ready training environment."""
    binary = tmp_path / "app" / "studio"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.frozen = True\n"
                      "runpy.run_module('studio', run_name='__main__', alter_sys=True)\n")
    binary.chmod(0o755)
    env = tmp_path / "training-env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (env / "bin" / "python").chmod(0o755)
    (env / READY_FILE).write_text("{}")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(binary))
    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(env))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return env


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload]


def test_the_askpass_script_runs_in_the_apps_own_binary(frozen: Path) -> None:
    from studio.core.remote.passphrases import KEY_ENV, askpass_env

    env = {**os.environ, **askpass_env(frozen / "no-key")}
    assert "--run-module studio.core.remote.passphrases" in Path(env["SSH_ASKPASS"]).read_text()
    # A password prompt is never answered from the keyring: exit 1 and nothing on stderr.
    out = run([env["SSH_ASKPASS"], "user@host's password:"], env=env)
    assert (out.returncode, out.stderr) == (1, "")
    env.pop(KEY_ENV)
    out = run([env["SSH_ASKPASS"], "Enter passphrase for key:"], env=env)
    assert (out.returncode, out.stderr) == (1, "")


def test_a_download_runs_in_the_training_environment(frozen: Path, fake_hub: FakeHub, tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    from studio.gui.widgets.downloads import download_command

    repo = "org/tiny"
    fake_hub.repos[repo] = tiny_sd15_repo()
    command = download_command(repo)
    assert command[:3] == [str(frozen / "bin" / "python"), "-m", "studio.cli"]
    env = {**os.environ, "HF_ENDPOINT": fake_hub.url, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "0"}
    out = run(command, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1])["type"] == "done"


def test_the_torch_probe_asks_the_training_environment(frozen: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.project.preflight import check_torch_cuda

    # A stand-in torch that only the environment's python sees (a real import takes 20 s on a busy CPU).
    stub = tmp_path / "env-site"
    stub.mkdir()
    (stub / "torch.py").write_text("__version__ = '2.13.0+stub'\nclass cuda:\n    is_available = staticmethod("
                                   "lambda: False)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(stub), str(ROOT)]))
    problem = check_torch_cuda(None)
    assert problem is not None and problem.message.startswith(
        f"torch 2.13.0+stub in {frozen / 'bin' / 'python'} cannot use the GPU"), problem


def test_without_an_environment_the_torch_probe_says_so(frozen: Path, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    from studio.core.project.preflight import check_torch_cuda

    monkeypatch.setenv("STUDIO_TRAINING_ENV", str(tmp_path / "none"))
    problem = check_torch_cuda(None)
    assert problem is not None and "Tools → Training Environment" in problem.message


def test_the_captioner_and_the_demo_model_run_in_the_training_environment(frozen: Path, tmp_path: Path) -> None:
    from studio.core.project.demo import create_demo_project, model_command
    from studio.gui.dataset.captions.job import caption_command

    caption = caption_command(None, tmp_path, "blip-base", "fill-missing", tmp_path / "images.txt")
    tiny = model_command(create_demo_project(tmp_path / "demo"))
    for command in (caption, tiny):
        assert command[:3] == [str(frozen / "bin" / "python"), "-m", "studio.cli"]
        out = run([*command[:4], "--help"])
        assert out.returncode == 0, out.stderr[-2000:]


def test_the_apps_binary_refuses_a_module_it_does_not_carry(frozen: Path) -> None:
    out = run([sys.executable, "--run-module", "studio.cli", "download", "org/name"])
    assert out.returncode == 2 and "training environment's Python" in out.stderr
