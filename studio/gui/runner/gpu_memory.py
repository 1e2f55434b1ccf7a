"""GPU memory as the driver sees it (NVML), polled by the GUI about once a second.

PyTorch's own numbers miss memory held outside its allocator (the CUDA context, other
programs, a desktop); NVML's "used" shows all of it. Without NVML (no NVIDIA driver,
no pynvml) the sampler is simply unavailable and nothing is drawn.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from studio.core.runs.records.run_model import Series

log = logging.getLogger(__name__)


@dataclass
class GpuTrace:
    index: int
    name: str
    total_mb: float
    times: Series = field(default_factory=Series)
    used: Series = field(default_factory=Series)


class GpuMemorySampler(QObject):
    sig_sampled = Signal()  # new points for every GPU

    def __init__(self, parent: QObject | None = None, interval_ms: int = 1000) -> None:
        super().__init__(parent)
        self.gpus: list[GpuTrace] = []
        self._handles: list[Any] = []
        self._nvml: Any = None
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.sample)

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def start(self) -> bool:
        if self._nvml is None and not self._init():
            return False
        self._timer.start()
        self.sample()
        return True

    def stop(self) -> None:
        self._timer.stop()

    def _init(self) -> bool:
        try:
            import pynvml
        except ImportError as exc:
            log.info("NVML unavailable (%s); GPU memory comes from the trainer's events only", exc)
            return False
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            for i in range(count):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                info = pynvml.nvmlDeviceGetMemoryInfo(handle)
                self._handles.append(handle)
                self.gpus.append(GpuTrace(i, str(name), info.total / 2**20))
            self._nvml = pynvml
        except pynvml.NVMLError as exc:  # no driver, no GPU: nothing to show
            log.info("NVML unavailable (%s); GPU memory comes from the trainer's events only", exc)
            self._handles, self.gpus = [], []
            return False
        return bool(self._handles)

    def sample(self) -> None:
        if self._nvml is None:
            return
        now = time.time()
        for gpu, handle in zip(self.gpus, self._handles, strict=True):
            try:
                info = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except self._nvml.NVMLError:  # the GPU fell off the bus or the driver was reloaded
                continue
            gpu.times.append(now)
            gpu.used.append(info.used / 2**20)
        self.sig_sampled.emit()
