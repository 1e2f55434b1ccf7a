"""Writes a bundle off the GUI thread and reports its progress."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QRunnable, Signal

from studio.core.config.errors import ConfigError
from studio.core.export.bundle import ExportError, export_bundle
from studio.core.export.gpu_catalogue import CatalogueError


@dataclass(frozen=True)
class ExportRequest:
    config_path: Path
    out_dir: Path
    options: dict[str, Any]  # keyword arguments of export_bundle


class ExportSignals(QObject):
    sig_progress = Signal(str, int, int)  # message, done, total
    sig_done = Signal(object)  # BundleReport
    sig_failed = Signal(str)


class ExportTask(QRunnable):
    def __init__(self, request: ExportRequest, signals: ExportSignals) -> None:
        super().__init__()
        self.request, self.signals = request, signals

    def run(self) -> None:
        request = self.request
        try:
            report = export_bundle(request.config_path, request.out_dir, progress=self.signals.sig_progress.emit,
                                   **request.options)
        except ConfigError as exc:
            self.signals.sig_failed.emit(exc.describe())
        except (ExportError, CatalogueError) as exc:
            self.signals.sig_failed.emit(str(exc))
        except OSError as exc:
            self.signals.sig_failed.emit(f"could not write the bundle to {request.out_dir}: {exc}")
        else:
            self.signals.sig_done.emit(report)
