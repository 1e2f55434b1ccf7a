"""The Training Environment window: shown on the first Train of the desktop app, and from
Tools → Training Environment. It says what the studio will install and why (the torch
build for this GPU's driver), what is wrong and how to fix it, and installs with a
progress bar that can be cancelled; a later install continues where it stopped.

The window never imports torch: the install runs pip or uv in subprocesses, from the
window's Worker, which only reports progress.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.core.resources import is_frozen
from studio.core.trainenv.doctor import ERROR, WARNING, EnvOverview, env_overview
from studio.core.trainenv.installer import STEPS, InstallResult, install
from studio.core.trainenv.progress import InstallProgress
from studio.core.trainenv.state import LOG_FILE
from studio.core.trainenv.steps import Cancelled, StepFailed
from studio.core.training_python import env_dir
from studio.gui.base.desktop import open_with_desktop
from studio.gui.base.names import named
from studio.gui.runner.worker import Job, Worker

STEP_WORDS = {"create": "Making the environment", "torch": "Installing PyTorch", "packages": "Installing the "
              "training libraries", "link": "Linking the studio's code", "verify": "Checking the environment"}
CANCEL_WAIT_MS = 15_000


class _InstallProgress(QObject):
    """Carries the install's progress from the Worker's thread to the window (a queued signal)."""

    sig_progress = Signal(object)  # InstallProgress


class TrainingEnvDialog(QDialog):
    sig_ready = Signal(str)  # the environment's Python, once an install finished

    def __init__(self, parent: QWidget | None = None, folder: Path | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("training_env_dialog")
        self.setWindowTitle("Training Environment")
        self.setMinimumWidth(640)
        self.folder = folder or env_dir()
        self.wheelhouse: Path | None = None  # chosen in this window; else $STUDIO_WHEELHOUSE or the internet
        # Asks for the folder of wheels ("" when the person cancels); tests replace it.
        self.ask_folder: Callable[[], str] = lambda: QFileDialog.getExistingDirectory(
            self, "Folder of wheels (.whl files)")
        self.overview: EnvOverview | None = None
        self._task: Job | None = None
        self._cancel_requested = False  # read by the install's watcher on the Worker's thread
        self.worker = Worker(self)
        self._progress = _InstallProgress(self)
        self._progress.sig_progress.connect(self._on_progress)
        self._build()
        self.refresh()

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Training runs in a Python environment of its own, with PyTorch and the training libraries. "
            f"The studio makes it once, in <code>{self.folder}</code>; the window and your projects stay as "
            "they are. PyTorch for an NVIDIA GPU is a download of a few GB.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.status = named(QLabel("Reading this machine…"), "env_status")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.findings = named(QListWidget(), "env_findings")
        self.findings.setWordWrap(True)
        self.findings.setMaximumHeight(140)
        layout.addWidget(self.findings)
        self.progress = named(QProgressBar(), "env_progress")
        self.progress.setRange(0, len(STEPS))
        self.progress.setValue(0)
        self.progress_label = named(QLabel(""), "env_progress_label")
        layout.addWidget(self.progress)
        layout.addWidget(self.progress_label)
        row = QHBoxLayout()
        self.install_button = named(QPushButton("Install"), "env_install")
        self.install_button.clicked.connect(self.start_install)
        self.cancel_button = named(QPushButton("Cancel install"), "env_cancel")
        self.cancel_button.clicked.connect(self.cancel_install)
        self.log_button = named(QPushButton("Show Log"), "env_log")
        self.log_button.clicked.connect(self.show_log)
        self.wheels_button = named(QPushButton("Install from a Folder of Wheels…"), "env_wheels")
        self.wheels_button.setToolTip("No internet here, or a company network that blocks the package "
                                      "indexes: install from a folder of .whl files (torch too) instead")
        self.wheels_button.clicked.connect(self.choose_wheelhouse)
        for button in (self.install_button, self.cancel_button, self.log_button, self.wheels_button):
            row.addWidget(button)
        row.addStretch(1)
        layout.addLayout(row)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.buttons.rejected.connect(self.close)
        layout.addWidget(self.buttons)
        self._set_busy(True, installing=False)

    # ------------------------------------------------------------ state

    @property
    def installing(self) -> bool:
        return self._task is not None

    def refresh(self) -> None:
        """Read the machine and the environment again (in the background)."""
        self._set_busy(True, installing=False)
        self.worker.run(env_overview, self.folder, self.wheelhouse, on_done=self._on_overview,
                        on_failed=self._overview_failed, expected=(OSError,))

    def _overview_failed(self, error: BaseException) -> None:
        self.status.setText(f"<b>Could not read the training environment:</b> {error}")
        self._set_busy(False, installing=False)

    def choose_wheelhouse(self) -> None:
        """Install from a folder of wheels: the next install reads only that folder."""
        chosen = self.ask_folder()
        if not chosen:
            return
        folder = Path(chosen)
        if not any(folder.glob("torch-*.whl")):
            self.progress_label.setText(f"<b>{folder} has no torch wheel</b> (torch-*.whl): choose a folder "
                                        "with every package of the environment, PyTorch too.")
            return
        self.wheelhouse = folder
        self.progress_label.setText(f"Installing from the wheels in {folder}.")
        self.refresh()

    def _set_busy(self, busy: bool, installing: bool) -> None:
        self.install_button.setEnabled(not busy and self.overview is not None and not self.overview.blocked)
        self.wheels_button.setEnabled(not installing)
        self.cancel_button.setEnabled(installing)
        self.log_button.setEnabled((self.folder / LOG_FILE).is_file())
        self.buttons.setEnabled(not installing)

    def _on_overview(self, overview: EnvOverview) -> None:
        self.overview = overview
        facts = overview.facts
        reason = overview.plan.build.reason if overview.plan else ""
        # The app updated into another folder: Install links this copy again, where Repair would install
        # every package again.
        if facts.get("ready") and not overview.needs_repair and any(
                f.code == "studio_unlinked" for f in overview.findings):
            self.status.setText("<b>Made by another copy of the studio.</b> Install links it to this one. "
                                f"{reason}.")
            self.install_button.setText("Install")
        elif overview.needs_repair:
            self.status.setText(f"<b>Needs repair.</b> {reason}.")
            self.install_button.setText("Repair")
        elif any(f.code == "install_unfinished" for f in overview.findings):
            self.status.setText(f"<b>The install stopped halfway.</b> Continue it where it stopped. {reason}.")
            self.install_button.setText("Continue Install")
        elif overview.ready:
            self.status.setText(f"<b>Ready.</b> PyTorch {facts.get('torch')} in {facts.get('folder')}. {reason}.")
            self.install_button.setText("Repair")
        elif not is_frozen():
            # A source checkout trains with the Python it runs on (training_python.default_training_python).
            self.status.setText(f"<b>Training uses this checkout's environment</b> ({sys.prefix}). Install sets "
                                f"up the studio's own one in {facts.get('folder') or self.folder}, as the "
                                f"installed app uses; it is not needed to train from here. {reason}.")
            self.install_button.setText("Install")
        else:
            self.status.setText(f"<b>Not set up yet.</b> {reason}.")
            self.install_button.setText("Install")
        self.findings.clear()
        shown = [f for f in overview.findings if is_frozen() or f.code != "not_installed"]
        for finding in shown:
            mark = {ERROR: "✖", WARNING: "⚠"}.get(finding.severity, "ℹ")
            self.findings.addItem(f"{mark} {finding.message}\n    → {finding.fix}")
        self.findings.setVisible(bool(shown))
        self._set_busy(False, installing=False)

    # ------------------------------------------------------------ install

    def start_install(self) -> None:
        if self.installing or self.overview is None or self.overview.plan is None:
            return
        force = self.install_button.text() == "Repair"
        plan = self.overview.plan
        self._cancel_requested = False
        self.progress.setValue(0)
        self.progress_label.setText("Starting…")
        self.findings.hide()  # they describe the state before the install; a new check follows it
        reason = self.overview.plan.build.reason
        self.status.setText(f"<b>{'Repairing' if force else 'Installing'}.</b> {reason}.")
        self._set_busy(True, installing=True)
        self._task = self.worker.run(install, plan, progress=self._progress.sig_progress.emit,
                                     cancel=lambda: self._cancel_requested, force=force,
                                     on_done=self._on_installed, on_failed=self._install_failed,
                                     expected=(Cancelled, StepFailed, OSError))

    def cancel_install(self) -> None:
        if self._task is not None:
            self._cancel_requested = True
            self.progress_label.setText("Cancelling…")
            self.cancel_button.setEnabled(False)

    def _on_progress(self, progress: InstallProgress) -> None:
        self.progress.setValue(progress.index - 1)
        text = f"{STEP_WORDS.get(progress.step, progress.step)} (step {progress.index} of {progress.count})"
        if progress.package:
            text += f": {progress.package}"
        if progress.bytes_total:
            text += f", {progress.bytes_done / 1e6:.0f} of {progress.bytes_total / 1e6:.0f} MB"
        self.progress_label.setText(text)

    def _on_installed(self, result: InstallResult) -> None:
        self._task = None
        self.progress.setValue(len(STEPS))
        self.progress_label.setText("Up to date: nothing needed doing." if result.up_to_date
                                    else f"Ready in {result.seconds:.0f} s.")
        self.sig_ready.emit(str(result.python))
        self.refresh()

    def _on_cancelled(self, message: str) -> None:
        self._task = None
        self.progress_label.setText(f"Cancelled: {message}.")
        self.refresh()

    def _install_failed(self, error: BaseException) -> None:
        if isinstance(error, Cancelled):
            self._on_cancelled(str(error))
        elif isinstance(error, StepFailed):
            self._on_failed(str(error))
        elif isinstance(error, OSError) and self.overview is not None and self.overview.plan is not None:
            self._on_failed(f"could not write the environment in {self.overview.plan.folder}: {error}")
        else:  # a bug: shown here, then reported by the Worker on the GUI thread
            self._on_failed(f"the install stopped on an unexpected error: {error!r}")

    def _on_failed(self, message: str) -> None:
        self._task = None
        self.progress_label.setText(f"<b>Failed:</b> {message}")
        self.progress_label.setWordWrap(True)
        self.refresh()

    def show_log(self) -> None:
        open_with_desktop(self, self.folder / LOG_FILE, "the install log")

    def closeEvent(self, event: QCloseEvent) -> None:
        # The install continues from this point next time; pip is stopped rather than left running.
        if self._task is not None:
            self._cancel_requested = True
        self.worker.wait(CANCEL_WAIT_MS / 1000)
        super().closeEvent(event)


def open_training_env_dialog(parent: QWidget) -> TrainingEnvDialog:
    """Show the window (one per parent), raised if it is already open."""
    dialog = parent.findChild(TrainingEnvDialog, "training_env_dialog")
    if dialog is None:
        dialog = TrainingEnvDialog(parent)
    elif not dialog.installing:
        dialog.refresh()
    dialog.show()
    dialog.raise_()
    return dialog
