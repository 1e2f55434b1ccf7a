"""The GPU memory of a remote machine, one sample per GPU a second, through one SSH session.

`nvidia-smi --query-gpu=... -l 1` runs there for as long as the run is followed and
prints a line per GPU each second; a dropped connection starts it again. A machine
without nvidia-smi (or whose driver does not answer) says so once, in `unavailable`,
and sends nothing more.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import IO

from studio.core.protocol.streaming import ReconnectingStream
from studio.core.remote.ssh import SshClient

NO_NVIDIA_SMI = "#no-nvidia-smi"
_QUERY = ("command -v nvidia-smi >/dev/null 2>&1 || { echo '#no-nvidia-smi'; exit 0; }; "
          "exec nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader,nounits -l 1")


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    used_mb: float
    total_mb: float
    time: float


def parse_gpu_line(line: str, now: float) -> GpuSample | None:
    """One line of nvidia-smi's CSV (`0, NVIDIA H100 80GB HBM3, 1234, 81559`); None when it is not one."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 4:
        return None
    try:
        return GpuSample(int(parts[0]), parts[1], float(parts[2]), float(parts[3]), now)
    except ValueError:
        return None


class RemoteGpuMonitor:
    """Samples of every GPU of a machine while started; `drain()` hands over what arrived."""

    def __init__(self, client: SshClient) -> None:
        self.client = client
        self.unavailable = ""  # why there are no samples, in words for the person
        self._samples: deque[GpuSample] = deque(maxlen=100_000)
        self._partial = b""
        self._lock = threading.Lock()
        self.stream = ReconnectingStream(f"{client.machine.name} GPUs", self._start, self._on_data)

    def start(self) -> None:
        self.stream.start()

    def close(self) -> None:
        self.stream.close()

    def drain(self) -> list[GpuSample]:
        with self._lock:
            samples = list(self._samples)
            self._samples.clear()
        return samples

    def _start(self, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        self._partial = b""  # a line a dropped connection cut stays cut: the new session starts its own
        return self.client.popen(f"sh -c {shlex.quote(_QUERY)}", stderr=stderr)

    def _on_data(self, chunk: bytes) -> None:
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        now = time.time()
        for raw in lines:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            if line == NO_NVIDIA_SMI:
                self.unavailable = f"no GPU on the remote: nvidia-smi is not installed on {self.client.machine.name}"
                continue
            sample = parse_gpu_line(line, now)
            if sample is None:  # "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
                self.unavailable = f"no GPU memory from {self.client.machine.name}: {line}"
                continue
            with self._lock:
                self._samples.append(sample)
