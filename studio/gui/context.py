"""The state every page shares: the open project, its config, settings, hardware profile, the run controller."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QSettings, Signal

from studio.gui.base.config_watch import ConfigFileWatcher

# The window is built with a context before its first paint; pydantic with the config schema and
# numpy with the run model load when a project is opened or a page needs them (imports inside the
# methods below), not on the start path (docs/benchmarks.md, "Window start").
if TYPE_CHECKING:
    from studio.core.config.errors import ConfigError, ConfigIssue
    from studio.core.config.files.paths import ResolvedConfig
    from studio.core.config.schema import TrainConfig
    from studio.core.project.folder import Project
    from studio.gui.runner.run_controller import RunController

HARDWARE_KEY = "hardware/plan_for"


class StudioContext(QObject):
    """Pages take this in their constructor and subscribe to its signals."""

    sig_project_changed = Signal(object)  # Project | None
    sig_config_changed = Signal(object)  # TrainConfig
    sig_status = Signal(str)  # a message for the status bar
    # The Train page asks the window to build the demo's tiny model (Project); the window answers
    # with sig_demo_model_built (True when it is there).
    sig_demo_model_wanted = Signal(object)
    sig_demo_model_built = Signal(bool)
    # studio.toml changed on disk and the person chose to read it again over their edits here: the
    # pages holding such edits (the TOML editor) drop them and show the file.
    sig_edits_discarded = Signal()

    def __init__(self, settings: QSettings, hardware_file: str | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.settings = settings
        self.project: Project | None = None
        self.config: TrainConfig | None = None
        self.config_error: ConfigError | None = None
        # The machine runs are planned for ("Plan for" on Model & Preset): named at start, else the
        # choice kept from the last session, else this machine (None).
        self.hardware_file: str | None = (hardware_file or os.environ.get("STUDIO_HARDWARE")
                                          or str(settings.value(HARDWARE_KEY, "") or "") or None)
        self._run_controller: RunController | None = None
        # Edits a page holds that are not in studio.toml (a refused value, TOML being edited): each
        # provider returns what they are, or "". Asked before studio.toml is read again from disk.
        self.unsaved_edits: list[Callable[[], str]] = []
        # Work the window holds that leaving the project or closing the window ends, though a reload of
        # studio.toml keeps it (a model's captions not yet reviewed): asked about with the edits above.
        self.unsaved_work: list[Callable[[], str]] = []
        # Asked when studio.toml changed on disk while there are unsaved edits: True reads it again.
        self.confirm_reload: Callable[[str], bool] = lambda _what: False
        self.watcher = ConfigFileWatcher(self)
        self.watcher.sig_changed.connect(self._file_changed)

    @property
    def run_controller(self) -> RunController:
        """One run at a time for the whole window: the Train and Runs pages are handed this one.
        Made when first asked for (a project opened, the Train or Runs page built)."""
        if self._run_controller is None:
            from studio.gui.runner.run_controller import RunController

            self._run_controller = RunController(self)
        return self._run_controller

    def plan_for(self, profile: str | None) -> None:
        """The hardware profile chosen to plan runs for (None: this machine), kept for the next start."""
        self.hardware_file = profile
        if profile:
            self.settings.setValue(HARDWARE_KEY, profile)
        else:
            self.settings.remove(HARDWARE_KEY)

    def set_project(self, project: Project | None) -> None:
        from studio.core.config.errors import ConfigError

        self.project = project
        self.watcher.watch(project.config_path if project is not None else None)
        self.config, self.config_error = None, None
        if project is not None:
            try:
                self.config = project.load_config()
            except ConfigError as exc:
                self.config_error = exc
        # The run shown is this project's newest (or none) before the pages hear of the project.
        self.run_controller.show_last_run(self.runs_dir() if project is not None else None)
        self.sig_project_changed.emit(project)
        if self.config is not None:
            self.sig_config_changed.emit(self.config)
        if project is not None:
            controller = self.run_controller
            queue = controller.queue
            if not controller.running and (queue is None or queue.root != project.root):
                # The pages built after this (the window builds them once the project is open) leave the
                # queue alone while a run is followed: the queue shown and run is this project's.
                controller.set_project_root(project.root)
            # A training left running when the studio last closed: the Train page follows it again.
            controller.attach_live(self.runs_dir())

    def runs_dir(self) -> Path:
        """Where the project's runs go (output.dir of its config)."""
        assert self.project is not None
        return self.project.resolve(self.config.output.dir) if self.config else self.project.runs_dir

    def set_config(self, config: TrainConfig, save: bool = True) -> None:
        """Adopt a new config (already validated) and write it to the project's studio.toml.

        Only what changed from the config this window had is written over the file as it is now:
        another window's change to the project just before is kept (and shown here)."""
        from studio.core.config.files.toml_file import NewerConfigError

        if save and self.project is not None:
            unreadable = self.config_error is not None
            try:
                config = self.project.save_config(config, base=self.config)
            except NewerConfigError as exc:  # the project stays as the newer studio wrote it
                self.status(f"Nothing was saved: {exc.source} was written by a newer studio ({exc.issues[0]}).")
                return
            except OSError as exc:  # a sync client or an antivirus holding the file, a full or read-only disk
                self.status(f"Nothing was saved: {self.project.config_path} could not be written "
                            f"({exc.strerror or exc}); make the change again once it can be (a sync client such "
                            "as OneDrive, or an antivirus, may hold the file for a moment).")
                return
            self.watcher.known()
            if unreadable:
                self.status(f"{self.project.config_path.name} could not be read; it is kept as "
                            f"{self.project.config_path.name}.unreadable beside it, and the settings shown here are saved.")
        self.config = config
        self.config_error = None
        self.sig_config_changed.emit(config)

    def change_config(self, changes: dict[str, Any]) -> list[ConfigIssue]:
        """Set dotted keys (`sampling.prompts`, `dataset.concepts`) and save; the issues when refused
        (nothing is changed then)."""
        from pydantic import ValidationError

        from studio.core.config.errors import ConfigIssue, issues_from_validation
        from studio.core.config.schema import TrainConfig
        from studio.core.estimate.plans.fixes import apply_changes

        if self.config is None:
            return [ConfigIssue(key="(file)", message="the project's config has errors; fix studio.toml first")]
        try:
            config = apply_changes(self.config, changes)
        except ValidationError as exc:
            return issues_from_validation(exc, TrainConfig)
        self.set_config(config)
        return []

    def apply_toml(self, text: str) -> TrainConfig:
        """Take a person's TOML for the project: validated first (ConfigError, nothing written), then
        written as typed, comments and all."""
        from studio.core.config.files.toml_file import parse_toml, validate_data
        from studio.core.files import atomic_write_text
        from studio.core.project_lock import project_lock

        assert self.project is not None
        source = str(self.project.config_path)
        config = validate_data(parse_toml(text, source).unwrap(), source, text)
        with project_lock(self.project.root):  # the person's text, whole: written in one piece
            atomic_write_text(self.project.config_path, text)
        self.watcher.known(text)
        self.set_config(config, save=False)
        return config

    def pending_edits(self) -> list[str]:
        return [what for what in (provider() for provider in self.unsaved_edits) if what]

    def lost_on_leaving(self) -> list[str]:
        """What leaving the project or closing the window would lose: the edits and the work above."""
        return [what for what in (provider() for provider in (*self.unsaved_edits, *self.unsaved_work)) if what]

    def _file_changed(self, _text: str) -> None:
        """studio.toml changed on disk: read it again, asking first when edits here would be lost."""
        pending = self.pending_edits()
        if pending:
            if not self.confirm_reload("; ".join(pending)):
                self.status("studio.toml changed on disk; your edits here are kept (they are saved over it)")
                return
            self.sig_edits_discarded.emit()
        self.reload_config()

    def reload_config(self) -> bool:
        """Read studio.toml again; a file with errors is named and the config in use stays."""
        from studio.core.config.errors import ConfigError

        if self.project is None:
            return False
        try:
            config = self.project.load_config()
        except ConfigError as exc:
            self.config_error = exc
            self.status(f"studio.toml changed on disk but cannot be used: {exc.describe()}")
            return False
        self.status("studio.toml changed on disk; the settings were read again")
        self.set_config(config, save=False)
        return True

    def resolved_config(self, config: TrainConfig) -> ResolvedConfig:
        """`config` with the project's relative paths made absolute (as a run folder holds it): what
        the estimate, the checks and the launch read, so a model folder of the project is sized as it is.
        Without a project its relative paths name nothing (`NO_FOLDER`). Raises ConfigError naming the
        field and its value when a path cannot be made absolute: the caller shows it, never the
        unresolved config."""
        from studio.core.config.files.paths import NO_FOLDER, resolve_paths

        return resolve_paths(config, self.project.root if self.project is not None else NO_FOLDER)

    def project_config(self) -> ResolvedConfig | None:
        """The project's settings as a run would start with them now; None without a readable config."""
        from studio.core.config.errors import ConfigError

        if self.config is None or self.project is None:
            return None
        try:
            return self.resolved_config(self.config)
        except ConfigError:
            return None

    def project_path(self, value: str) -> Path:
        if self.project is None:
            return Path(value)
        return self.project.resolve(value)

    def dialog_folder(self) -> str:
        """Where a file dialog opens: the project's folder (empty without a project: the dialog's own)."""
        return str(self.project.root) if self.project is not None else ""

    def projects_folder(self) -> str:
        """Where Open project opens: beside the open project, where a person keeps their projects."""
        return str(self.project.root.parent) if self.project is not None else ""

    def status(self, message: str) -> None:
        self.sig_status.emit(message)
