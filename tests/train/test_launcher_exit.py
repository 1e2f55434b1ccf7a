"""How `studio.train.launcher` ends a run of several processes whose ranks failed: with their exit code."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from studio.core.runs.launch import free_port
from studio.train import launcher


def test_a_failed_rank_of_several_ends_the_launch_with_its_exit_code_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """A run on two GPUs whose ranks fail (they have said why in the events and the console): the console
    ended with a launcher's traceback of forty lines (ChildFailedError) under the trainer's own error, and the
    exit code was 1 whatever the ranks said (2: a config to fix)."""
    (tmp_path / "failing_rank.py").write_text("import sys\nprint('error (config): a setting to fix')\nsys.exit(2)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    from accelerate.commands import launch

    for name in ("simple_launcher", "_validate_launch_command"):
        monkeypatch.setattr(launch, name, getattr(launch, name))  # main() wraps them
    argv = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--main_process_port", str(free_port()),
            "-m", "failing_rank"]
    assert launcher.main(argv) == 2
    said = capfd.readouterr()
    assert said.out.count("error (config): a setting to fix") == 2  # both ranks ran
    assert "Traceback" not in said.err and "ChildFailedError" not in said.err
