"""The state every page shares: the open project, its config, settings, hardware profile, the run controller."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Signal

from studio.core.config.errors import ConfigError
from studio.core.config.schema import TrainConfig
from studio.core.project.folder import Project
from studio.gui.run_controller import RunController


class StudioContext(QObject):
    """Pages take this in their constructor and subscribe to its signals."""

    sig_project_changed = Signal(object)  # Project | None
    sig_config_changed = Signal(object)  # TrainConfig
    sig_status = Signal(str)  # a message for the status bar

    def __init__(self, settings: QSettings, hardware_file: str | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.settings = settings
        self.project: Project | None = None
        self.config: TrainConfig | None = None
        self.config_error: ConfigError | None = None
        self.hardware_file: str | None = hardware_file or os.environ.get("STUDIO_HARDWARE") or None
        # One run at a time for the whole window: the Train and Runs pages are handed this one.
        self.run_controller = RunController(self)

    def set_project(self, project: Project | None) -> None:
        self.project = project
        self.config, self.config_error = None, None
        if project is not None:
            try:
                self.config = project.load_config()
            except ConfigError as exc:
                self.config_error = exc
        self.sig_project_changed.emit(project)
        if self.config is not None:
            self.sig_config_changed.emit(self.config)

    def set_config(self, config: TrainConfig, save: bool = True) -> None:
        """Adopt a new config (already validated) and write it to the project's studio.toml."""
        self.config = config
        self.config_error = None
        if save and self.project is not None:
            self.project.save_config(config)
        self.sig_config_changed.emit(config)

    def project_path(self, value: str) -> Path:
        if self.project is None:
            return Path(value)
        return self.project.resolve(value)

    def status(self, message: str) -> None:
        self.sig_status.emit(message)
