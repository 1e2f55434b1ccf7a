"""The hardware panel: GPU cards with VRAM bars, CPU/RAM/disk, and a profile picker.

Probing may run nvidia-smi, so it happens on a pool thread; the result comes
back through a queued signal and the window never waits.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QVBoxLayout,
    QWidget,
)

from studio.core.hardware.estimate import other_processes_warning
from studio.core.hardware.probe import list_profiles, load_hardware
from studio.core.hardware.report import HardwareProfileError, HardwareReport
from studio.gui.page import named

THIS_MACHINE = "This machine"


class _ProbeSignals(QObject):
    sig_done = Signal(object, object, str)  # task, HardwareReport | None, error text


class _ProbeTask(QRunnable):
    def __init__(self, profile: str | None, disk_path: str | None) -> None:
        super().__init__()
        self.profile, self.disk_path = profile, disk_path
        self.signals = _ProbeSignals()

    def run(self) -> None:
        try:
            report = load_hardware(self.profile, disk_path=self.disk_path)
        except HardwareProfileError as exc:
            self.signals.sig_done.emit(self, None, str(exc))
            return
        self.signals.sig_done.emit(self, report, "")


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
        self._tasks: set[_ProbeTask] = set()
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
        layout.addLayout(self.cards)
        self.host = named(QLabel(), "hardware_host")
        self.host.setWordWrap(True)
        layout.addWidget(self.host)
        self.picker.currentIndexChanged.connect(lambda _i: self.refresh())

    def refresh(self) -> None:
        """Probe (or load the chosen profile) on a pool thread."""
        self.status.setText("Reading the hardware…")
        task = _ProbeTask(self.picker.currentData(), self.disk_path)
        task.setAutoDelete(False)
        self._tasks.add(task)
        # A bound method of this widget, so the result is queued to the GUI thread.
        task.signals.sig_done.connect(self._done)
        QThreadPool.globalInstance().start(task)

    def load_now(self, profile: str | None) -> None:
        """Load synchronously (self-test, tests with a profile file)."""
        try:
            self.show_report(load_hardware(profile, disk_path=self.disk_path))
        except HardwareProfileError as exc:
            self.status.setText(f"⚠ {exc}")

    def _done(self, task: _ProbeTask, report: HardwareReport | None, error: str) -> None:
        self._tasks.discard(task)
        if report is None:
            self.status.setText(f"⚠ {error}")
            return
        self.show_report(report)

    def wait(self, msecs: int = 30000) -> None:
        QThreadPool.globalInstance().waitForDone(msecs)

    def show_report(self, report: HardwareReport) -> None:
        self.report = report
        while self.cards.count():
            item = self.cards.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        where = f"profile {report.profile}" if report.profile else "this machine"
        if report.gpus:
            self.status.setText(f"{report.summary()} ({where})")
            for index in range(len(report.gpus)):
                self.cards.addWidget(GpuCard(report, index))
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
