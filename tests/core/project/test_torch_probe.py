"""Pressing Train asks the training interpreter whether its torch can use CUDA: once per torch install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from studio.core.project import torch_probe


def _torch(site: Path, available: bool) -> Path:
    """A stand-in torch, and the trainer's other packages (only looked up), in a training environment's site."""
    for name in torch_probe.TRAINER_PACKAGES:
        (site / f"{name}.py").touch()
    stub = site / "torch.py"
    stub.write_text(f"__version__ = '2.13.0+stub'\nclass cuda:\n    is_available = staticmethod(lambda: {available})\n")
    return stub


def test_train_pressed_again_does_not_import_torch_again_until_it_is_reinstalled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "env-site"
    site.mkdir()
    stub = _torch(site, available=False)
    monkeypatch.setenv("PYTHONPATH", str(site))
    asked: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(argv: list[str], **options: Any) -> Any:
        asked.append(argv)
        return real_run(argv, **options)

    monkeypatch.setattr(subprocess, "run", counting_run)
    first = torch_probe.check_torch_cuda(sys.executable)
    again = torch_probe.check_torch_cuda(sys.executable)
    assert first is not None and first.message.startswith(f"torch 2.13.0+stub in {sys.executable} cannot use the GPU")
    assert again is not None and again.message == first.message
    assert len(asked) == 1  # the second press answered at once: the window does not freeze for an import of torch

    # The person installs a CUDA build from the message's advice: the next press asks again and starts.
    _torch(site, available=True)
    later = stub.stat().st_mtime_ns + 5_000_000_000
    os.utime(stub, ns=(later, later))
    assert torch_probe.check_torch_cuda(sys.executable) is None
    assert len(asked) == 2


def test_an_interpreter_without_torch_is_asked_each_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # no torch there (nor in this Python, isolated from it below)
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import no_such_module_torch' \"$@\"\n")
    no_torch.chmod(0o755)
    for _ in range(2):
        problem = torch_probe.check_torch_cuda(str(no_torch))
        assert problem is not None and "has no torch: install the studio's training packages" in problem.message
    site = tmp_path / "site"
    site.mkdir()
    _torch(site, available=True)
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert torch_probe.check_torch_cuda(sys.executable) is None  # installed since: found at the next press
