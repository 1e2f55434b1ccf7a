"""A remote machine's GPU memory in the plots, as `GpuMemorySampler` shows this machine's.

The samples come from `nvidia-smi` over SSH (core/remote/gpu.py); whoever follows
the run hands them over with `feed`. A machine without a GPU has no traces and says why
in `unavailable`.
"""

from __future__ import annotations

from PySide6.QtCore import QObject

from studio.core.remote.gpu import GpuSample
from studio.gui.runner.gpu_memory import GpuMemorySampler, GpuTrace


class RemoteGpuSampler(GpuMemorySampler):
    def __init__(self, machine: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.machine = machine
        self.unavailable = ""
        self._feeding = False

    @property
    def available(self) -> bool:
        return bool(self.gpus)

    def start(self) -> bool:
        self._feeding = True
        return True

    def stop(self) -> None:
        self._feeding = False

    def sample(self) -> None:
        """Samples arrive by `feed`; there is nothing to ask here."""

    def feed(self, samples: list[GpuSample]) -> None:
        if not samples or not self._feeding:
            return
        traces = {g.index: g for g in self.gpus}
        for sample in samples:
            trace = traces.get(sample.index)
            if trace is None:
                trace = traces[sample.index] = GpuTrace(sample.index, f"{self.machine}: {sample.name}", sample.total_mb)
                self.gpus.append(trace)
            trace.times.append(sample.time)
            trace.used.append(sample.used_mb)
        self.sig_sampled.emit()
