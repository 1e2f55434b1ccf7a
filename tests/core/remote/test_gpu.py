"""A remote machine's GPU memory from nvidia-smi, and the clean "no GPU on the remote" without one.

The query script runs here under `sh` with a stand-in nvidia-smi on PATH (or none), as it runs
there under ssh; what is parsed is the CSV nvidia-smi prints.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import IO

from studio.core.remote.gpu import RemoteGpuMonitor, parse_gpu_line
from studio.core.remote.machines import RemoteMachine
from studio.core.remote.probe import parse_report

H100 = "NVIDIA H100 80GB HBM3"


class LocalShell:
    """Stands in for an SshClient: runs the command here as a login shell there would, with PATH limited."""

    def __init__(self, bin_dir: Path) -> None:
        self.machine = RemoteMachine("pod", "203.0.113.9")
        self.bin_dir = bin_dir

    def popen(self, command: str, stderr: IO[bytes] | int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PATH": f"{self.bin_dir}:/usr/bin:/bin"}
        return subprocess.Popen(shlex.split(command), stdout=subprocess.PIPE, stderr=stderr, env=env)


def _fake_smi(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def _monitor(bin_dir: Path) -> RemoteGpuMonitor:
    monitor = RemoteGpuMonitor(LocalShell(bin_dir))  # type: ignore[arg-type]
    monitor.start()
    assert monitor.stream.wait(20)
    monitor.close()
    return monitor


def test_two_gpus_are_sampled_from_nvidia_smis_csv(tmp_path: Path) -> None:
    lines = "\\n".join(f"{i}, {H100}, {1000 * (i + 1) + t}, 81559" for t in range(3) for i in range(2))
    _fake_smi(tmp_path / "bin", f'printf "{lines}\\n"')
    before = time.time()
    samples = _monitor(tmp_path / "bin").drain()
    assert [(s.index, s.used_mb) for s in samples] == [(0, 1000), (1, 2000), (0, 1001), (1, 2001), (0, 1002),
                                                         (1, 2002)]
    assert {s.name for s in samples} == {H100} and {s.total_mb for s in samples} == {81559}
    assert all(s.time >= before for s in samples)


def test_without_nvidia_smi_it_says_there_is_no_gpu_on_the_remote(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    monitor = _monitor(tmp_path / "bin")
    assert monitor.drain() == []
    assert monitor.unavailable == "no GPU on the remote: nvidia-smi is not installed on pod"


def test_a_driver_that_does_not_answer_is_said_in_its_own_words(tmp_path: Path) -> None:
    failure = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    _fake_smi(tmp_path / "bin", f'echo "{failure}"; exit 9')
    monitor = _monitor(tmp_path / "bin")
    assert monitor.drain() == [] and monitor.unavailable == f"no GPU memory from pod: {failure}"
    assert monitor.stream.exit_code == 9


def test_the_machine_check_reads_the_gpus() -> None:
    out = (f"system=Linux x86_64\nworkspace=/workspace\nwritable=1\npython=3.11.9\nhas_nvidia-smi=1\n"
           f"gpu=0, {H100}, 81559\ngpu=1, {H100}, 81559\nhas_rsync=1\n")
    report = parse_report("pod", "root@pod", out)
    assert report.python_ok and report.rsync and report.nvidia_smi and not report.tmux
    assert [g.index for g in report.gpus] == [0, 1]
    assert report.gpu_text() == f"2 GPU(s): {H100} (80 GB)"
    assert report.detach_mode == "nohup"
    assert parse_gpu_line("0, A100, not a number, 1", 0.0) is None


def test_a_line_cut_by_a_dropped_connection_is_not_taken_for_a_driver_failure(tmp_path: Path) -> None:
    """The connection drops in the middle of a line: the next session's first line is read alone, the GPU
    samples go on, and no "no GPU memory" notice is made of the two halves."""
    marker = tmp_path / "dropped-once"
    _fake_smi(tmp_path / "bin", f'if [ ! -f {marker} ]; then touch {marker}; printf "0, {H100}, 10"; exit 255; fi\n'
                                f'printf "0, {H100}, 1234, 81559\\n"')
    monitor = _monitor(tmp_path / "bin")
    assert monitor.stream.reconnects == 1
    assert monitor.unavailable == ""
    assert [(s.index, s.used_mb) for s in monitor.drain()] == [(0, 1234)]
