"""On Windows the desktop app has no console: the console programs it starts must not open windows of their own.

Windows is simulated: the platform as the modules read it, and a stand-in for `subprocess` that
records how each program would be started (a real start with these flags works on Windows only).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from studio.core import console_window
from studio.core.hardware.machine import probes
from studio.core.project import preflight
from studio.core.remote import ssh
from studio.core.remote.machines import RemoteMachine
from studio.core.trainenv import state, steps, tools
from studio.core.trainenv.progress import InstallProgress, OutputReader

CREATE_NO_WINDOW = 0x08000000
CREATE_NEW_PROCESS_GROUP = 0x00000200


class _Windows:
    """`sys` or `os` as a module sees them on Windows."""

    platform = "win32"
    name = "nt"

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._module, attribute)


class _Starts:
    """subprocess.run and Popen that record their creationflags and start nothing."""

    def __init__(self) -> None:
        self.flags: list[int] = []

    def run(self, argv: list[str], **options: Any) -> subprocess.CompletedProcess[Any]:
        self.flags.append(options.get("creationflags", 0))
        return subprocess.CompletedProcess(argv, 0, b"" if "text" not in options else "", b"")

    def popen(self, argv: list[str], **options: Any) -> Any:
        self.flags.append(options.get("creationflags", 0))
        raise OSError("started nothing")


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> _Starts:
    import sys

    starts = _Starts()
    monkeypatch.setattr(console_window, "sys", _Windows(sys))
    monkeypatch.setattr(steps, "os", _Windows(os))
    monkeypatch.setattr(subprocess, "CREATE_NEW_PROCESS_GROUP", CREATE_NEW_PROCESS_GROUP, raising=False)
    monkeypatch.setattr(subprocess, "run", starts.run)
    monkeypatch.setattr(subprocess, "Popen", starts.popen)
    return starts


def test_the_install_steps_and_probes_start_without_a_console_window(windows: _Starts, tmp_path: Path) -> None:
    with pytest.raises(steps.StepFailed):  # uv or pip, for minutes: a black window for the whole download
        steps.run_logged(["uv", "pip", "install", "torch"], "torch", tmp_path / "install.log",
                         OutputReader(InstallProgress("torch", 2, 5)), None, None)
    assert windows.flags == [CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW]
    windows.flags.clear()
    tools.python_version("python")
    (tmp_path / "Scripts").mkdir()
    (tmp_path / "Scripts" / "python.exe").touch()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    state.check_env(tmp_path, ["torch"])
    probes.run_torch_probe("python")
    preflight.check_torch_cuda("python")
    assert windows.flags == [CREATE_NO_WINDOW] * 4


def test_a_remote_runs_ssh_calls_and_streams_start_without_a_console_window(
        windows: _Starts, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssh, "_ssh_program", lambda: r"C:\Windows\System32\OpenSSH\ssh.exe")
    client = ssh.SshClient(RemoteMachine("pod", "pod.example"))
    client.multiplex = False  # Windows' OpenSSH has none
    client.python("print(1)", "asking")
    with pytest.raises(OSError):
        client.popen("tail -f events.jsonl")  # for the whole run: a window that never goes away
    assert windows.flags == [CREATE_NO_WINDOW] * 2


def test_elsewhere_no_flags_are_given() -> None:
    assert console_window.no_window() == 0  # POSIX refuses any creationflags
