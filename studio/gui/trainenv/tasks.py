"""Background work of the Training Environment window: read the machine and the environment,
and install; pip and uv run in subprocesses, the window only hears their progress."""

from __future__ import annotations

import traceback
from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, Signal

from studio.core.trainenv.doctor import env_overview
from studio.core.trainenv.installer import install
from studio.core.trainenv.plan import InstallPlan
from studio.core.trainenv.steps import Cancelled, StepFailed


class EnvSignals(QObject):
    sig_overview = Signal(object)  # EnvOverview
    sig_progress = Signal(object)  # InstallProgress
    sig_installed = Signal(object)  # InstallResult
    sig_cancelled = Signal(str)
    sig_failed = Signal(str)


class OverviewTask(QRunnable):
    def __init__(self, folder: Path | None, signals: EnvSignals, wheelhouse: Path | None = None) -> None:
        super().__init__()
        self.setAutoDelete(False)
        self.folder, self.signals, self.wheelhouse = folder, signals, wheelhouse

    def run(self) -> None:
        try:
            overview = env_overview(self.folder, self.wheelhouse)
        except Exception as exc:  # a thread boundary: the window shows it, nothing is lost
            traceback.print_exc()
            self.signals.sig_failed.emit(f"could not read the training environment: {exc}")
        else:
            self.signals.sig_overview.emit(overview)


class InstallTask(QRunnable):
    """One install; `cancel()` ends the running pip or uv within a moment and keeps what finished."""

    def __init__(self, plan: InstallPlan, signals: EnvSignals, force: bool) -> None:
        super().__init__()
        self.setAutoDelete(False)
        self.plan, self.signals, self.force = plan, signals, force
        self.cancelled = False  # set on the GUI thread, read by the install's watcher

    def cancel(self) -> None:
        self.cancelled = True

    def run(self) -> None:
        try:
            result = install(self.plan, progress=self.signals.sig_progress.emit, cancel=lambda: self.cancelled,
                             force=self.force)
        except Cancelled as exc:
            self.signals.sig_cancelled.emit(str(exc))
        except StepFailed as exc:
            self.signals.sig_failed.emit(str(exc))
        except OSError as exc:
            self.signals.sig_failed.emit(f"could not write the environment in {self.plan.folder}: {exc}")
        except Exception as exc:  # a thread boundary: the window shows it, nothing is lost
            traceback.print_exc()
            self.signals.sig_failed.emit(f"the install stopped on an unexpected error: {exc!r}")
        else:
            self.signals.sig_installed.emit(result)
