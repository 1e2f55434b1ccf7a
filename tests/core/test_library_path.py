"""The programs the frozen app starts on Linux get the person's library path, not the app's own folder of
libraries (ssh would load the app's OpenSSL, a file manager its Qt). The real frozen app is checked by
tests/packaging/test_frozen_app.py in the package job."""

from __future__ import annotations

import subprocess
import sys

import pytest

from studio.core.resources import restore_library_path

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux app's loader sets it")


def _child_sees(env: dict[str, str]) -> str:
    out = subprocess.run(["/bin/sh", "-c", 'printf %s "${LD_LIBRARY_PATH-unset}"'], env=env, capture_output=True,
                         text=True, timeout=30, check=True)
    return out.stdout


def test_the_persons_library_path_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/studio/_internal:/opt/cuda/lib64",
           "LD_LIBRARY_PATH_ORIG": "/opt/cuda/lib64"}
    restore_library_path(env)
    assert _child_sees(env) == "/opt/cuda/lib64" and "LD_LIBRARY_PATH_ORIG" not in env


def test_none_of_the_persons_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/studio/_internal"}
    restore_library_path(env)
    assert _child_sees(env) == "unset"


def test_a_source_run_keeps_its_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/mine", "LD_LIBRARY_PATH_ORIG": "/elsewhere"}
    restore_library_path(env)
    assert _child_sees(env) == "/opt/mine"
