"""The project's lock: one writer at a time, a clear message when another process keeps it, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from studio.core.project_lock import ProjectBusyError, project_lock

_HOLDER = """
import sys
from studio.core.project_lock import project_lock
with project_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_lock_another_process_keeps_is_reported_and_nothing_is_left_in_the_folder(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ProjectBusyError) as caught, project_lock(tmp_path, wait_s=0.2):
            pass
        assert f"has held the lock of the project {tmp_path} for 0 s, so nothing was changed" in str(caught.value)
    finally:
        holder.communicate("\n", timeout=30)
    with project_lock(tmp_path), project_lock(tmp_path):  # free again; a nested take in one thread does not wait
        pass
    assert list(tmp_path.iterdir()) == []
