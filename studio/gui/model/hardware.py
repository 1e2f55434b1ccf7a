"""The hardware panel: GPU cards with VRAM bars, CPU/RAM/disk, and a profile picker.

Probing may run nvidia-smi, so it happens on the panel's worker thread; the result
comes back to the GUI thread and the window never waits.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QVBoxLayout,
    QWidget,
)

from studio.core.estimate.estimate import other_processes_warning
from studio.core.hardware.machine.probe import list_profiles, load_hardware
from studio.core.hardware.report import HardwareProfileError, HardwareReport
from studio.gui.base.layout_state import remove_widgets
from studio.gui.base.names import named
from studio.gui.runner.worker import Job, Worker

THIS_MACHINE = "This machine"


class GpuCard(QFrame):
    def __init__(self, report: HardwareReport, index: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        gpu = report.gpus[index]
        self.setObjectName(f"gpu_card_{index}")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        facts = [f"compute {gpu.compute_capability}" if gpu.compute_capability else "",
                 "bf16" if gpu.bf16 else "", f"NVLink x{len(gpu.nvlink)}" if gpu.nvlink else ""]
        layout.addWidget(QLabel(f"<b>GPU {gpu.index}: {gpu.name}</b>"
                                + "".join(f" · {f}" for f in facts if f)))
        bar = named(QProgressBar(), f"vram_bar_{index}")
        bar.setRange(0, max(1, gpu.total_mb))
        bar.setValue(gpu.total_mb - gpu.free_mb)
        bar.setFormat(f"{(gpu.total_mb - gpu.free_mb) / 1024:.1f} of {gpu.total_mb / 1024:.1f} GB in use")
        layout.addWidget(bar)
        warning = other_processes_warning(gpu)
        if warning:
            label = named(QLabel(f"⚠ {warning}"), f"vram_warning_{index}")
            label.setWordWrap(True)
            layout.addWidget(label)


class HardwarePanel(QFrame):
    """Shows a HardwareReport; `sig_report` fires when a probe or a chosen profile arrives."""

    sig_report = Signal(object)  # HardwareReport

    def __init__(self, profile: str | None = None, disk_path: str | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hardware_panel")
        self.report: HardwareReport | None = None
        self.disk_path = disk_path
        self.worker = Worker(self)
        self._probe: Job | None = None
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        top.addWidget(QLabel("<b>Hardware</b>"))
        top.addStretch(1)
        top.addWidget(QLabel("Plan for:"))
        self.picker = named(QComboBox(), "hardware_profile")
        self.picker.setToolTip("Choose a hardware profile to prepare a run for another machine (e.g. a rented GPU)")
        self.picker.addItem(THIS_MACHINE, None)
        for name in list_profiles():
            self.picker.addItem(name, name)
        if profile:
            shown = Path(profile).stem if Path(profile).suffix == ".json" else profile
            if self.picker.findData(shown) < 0:
                self.picker.addItem(shown, profile)
            self.picker.setCurrentIndex(self.picker.findData(shown if self.picker.findData(shown) >= 0 else profile))
        top.addWidget(self.picker)
        layout.addLayout(top)
        self.status = named(QLabel("Reading the hardware…"), "hardware_status")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.cards = QVBoxLayout()
        self._cards: list[QWidget] = []
        layout.addLayout(self.cards)
        self.host = named(QLabel(), "hardware_host")
        self.host.setWordWrap(True)
        layout.addWidget(self.host)
        self.picker.currentIndexChanged.connect(lambda _i: self.refresh())

    def refresh(self) -> None:
        """Probe (or load the chosen profile) on the worker thread; a newer choice replaces an older one."""
        self.status.setText("Reading the hardware…")
        if self._probe is not None:
            self._probe.cancel()
        self._probe = self.worker.run(load_hardware, self.picker.currentData(), disk_path=self.disk_path,
                                      on_done=self.show_report, on_failed=self._failed,
                                      expected=(HardwareProfileError,))

    def load_now(self, profile: str | None) -> None:
        """Load synchronously (self-test, tests with a profile file); a probe still running is dropped."""
        if self._probe is not None:
            self._probe.cancel()
        try:
            self.show_report(load_hardware(profile, disk_path=self.disk_path))
        except HardwareProfileError as exc:
            self.status.setText(f"⚠ {exc}")

    def _failed(self, error: BaseException) -> None:
        self.status.setText(f"⚠ {error}")

    def wait(self, timeout_s: float = 30.0) -> None:
        """Let a running probe finish and show its result (self-test, tests, shutdown)."""
        self.worker.wait(timeout_s)

    def show_report(self, report: HardwareReport) -> None:
        self.report = report
        remove_widgets(self.cards, self._cards)
        where = f"profile {report.profile}" if report.profile else "this machine"
        if report.gpus:
            self.status.setText(f"{report.summary()} ({where})")
            for index in range(len(report.gpus)):
                card = GpuCard(report, index)
                self.cards.addWidget(card)
                self._cards.append(card)
        else:
            reasons = "; ".join(n for n in report.notes if not n.startswith("No GPU found"))
            self.status.setText(
                f"<b>No GPU found</b> on {where}. Training here would use the CPU and be very slow. "
                "Choose a profile above to prepare a run for a machine with a GPU."
                + (f"<br><small>{reasons}</small>" if reasons else ""))
        disk = f" · {report.disk_free_mb / 1024:.0f} GB free disk" if report.disk_free_mb is not None else ""
        self.host.setText(f"CPU: {report.cpu_model} ({report.cores} threads) · "
                          f"RAM: {report.ram_mb / 1024:.0f} GB{disk}")
        self.sig_report.emit(report)
