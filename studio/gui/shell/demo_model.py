"""The demo project's tiny model: built in a subprocess when the demo needs it, its progress on the banner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject

from studio.core.training_python import needs_training_env
from studio.gui.context import StudioContext
from studio.gui.shell.demo_banner import READY, DemoBanner

# Loaded when first used, not before the first paint: the demo (pydantic with the config schema) and
# the builder's process (the run launcher).
if TYPE_CHECKING:
    from studio.core.project.folder import Project
    from studio.gui.runner.process import CommandProcess, Outcome


class DemoModel(QObject):
    """Builds the demo's model once asked; `context.sig_demo_model_built` says how it ended."""

    def __init__(self, context: StudioContext, banner: DemoBanner, parent: QObject) -> None:
        super().__init__(parent)
        self.context, self.banner = context, banner
        self._builder: CommandProcess | None = None

    def needs_building(self, project: Project) -> bool:
        """The demo project with its stand-in model, not built yet."""
        from studio.core.project.demo import demo_model_ready, is_demo_model, is_demo_project

        config = self.context.config
        return (config is not None and is_demo_project(project) and is_demo_model(config.model.base)
                and not demo_model_ready(project))

    def training_env_ready(self, _python: str) -> None:
        """The training environment became ready: an open demo gets its model now."""
        project = self.context.project
        if project is not None and self.needs_building(project):
            self.build(project)

    @property
    def builder(self) -> CommandProcess:
        """The process that builds the demo's tiny model; made when first needed."""
        if self._builder is None:
            from studio.gui.runner.process import CommandProcess

            self._builder = CommandProcess(self)
            self._builder.sig_finished.connect(self._built)
            self._builder.sig_output.connect(self.banner.build_output)
        return self._builder

    def build(self, project: Project) -> None:
        """Build the demo's tiny model in a subprocess; the window stays responsive.

        Its output goes to models/tiny-sd15.log in the demo project.
        """
        from studio.core.project.demo import DEMO_MODEL, demo_model_ready, model_command

        if demo_model_ready(project):
            self.context.sig_demo_model_built.emit(True)
            return
        if self.builder.is_running():
            return
        if needs_training_env(None):
            self.context.status("The demo's model is built with PyTorch: set up Tools → Training Environment first.")
            self.context.sig_demo_model_built.emit(False)
            return
        log = (project.root / DEMO_MODEL).with_suffix(".log")
        log.parent.mkdir(parents=True, exist_ok=True)
        self.context.status("Building the demo's tiny model…")
        self.banner.building()
        self.builder.start(model_command(project), log)

    def _built(self, outcome: Outcome) -> None:
        code = outcome.code
        if outcome.ok:
            self.context.status("The demo model is ready: press Train on the Train page.")
            self.banner.set_model_state(READY)
            self.context.sig_demo_model_built.emit(True)
        else:
            output = self.builder.console_tail(200)
            self.context.status(f"Building the demo model failed (exit {code}). {output} "
                                f"(all of it in {self.builder.console_path})")
            self.banner.set_model_state(f"Building the tiny model failed (exit {code}); "
                                        f"what it printed is in {self.builder.console_path}.")
            self.context.sig_demo_model_built.emit(False)

    def stop(self) -> None:
        """The window closes: a build still running is ended."""
        if self._builder is not None:
            self._builder.kill_now(2.0)
