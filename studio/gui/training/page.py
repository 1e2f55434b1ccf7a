"""The Train page: start a run, watch loss, memory and samples live, stop or kill it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import ArchitectureDataError, estimate_vram
from studio.core.hardware.machine.probe import load_hardware
from studio.core.hardware.report import GPUInfo, HardwareProfileError
from studio.core.project.demo import demo_model_ready, is_demo_model, is_demo_project
from studio.core.project.folder import Project
from studio.core.project.preflight import PreflightProblem, check_gpu_ids, preflight
from studio.core.runs.folders import ran_elsewhere
from studio.core.runs.live import busy_message, find_live_runs
from studio.core.runs.run_settings import resume_note
from studio.core.text import memory_text
from studio.core.training_python import needs_training_env
from studio.gui.base.event_loop import wait_for
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext
from studio.gui.page import Page
from studio.gui.runner.run_controller import RunController
from studio.gui.trainenv.window import TrainingEnvDialog, open_training_env_dialog
from studio.gui.training.console import ConsolePane
from studio.gui.training.sampling_editor import SamplingEditor
from studio.gui.training.self_test import page_self_test
from studio.gui.widgets.downloads import DownloadDialog
from studio.gui.widgets.run_header import ErrorBanner, RunHeader
from studio.gui.widgets.run_plots import RunPlots
from studio.gui.widgets.samples_gallery import SamplesGallery

STOP_WAIT_S = 60.0


class TrainPage(Page):
    title = "Train"
    page_id = "page_train"

    def __init__(self, context: StudioContext, controller: RunController, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self.controller = controller
        self.detach_on_close = False
        # Asked before a run that may not fit; tests replace it.
        self.confirm: Callable[[str, str], bool] = self._confirm_dialog
        self.download_dialog: DownloadDialog | None = None
        # Asked when the window closes during a run: "stop", "keep" (detached) or "cancel".
        self.ask_close: Callable[[], str] = self._close_dialog

        self.train_button = QPushButton("Train")
        self.train_button.setObjectName("train_start")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("train_stop")
        self.stop_button.setToolTip("Stop at the next step, saving a checkpoint (the run can be resumed)")
        self.resume_button = QPushButton("Resume")
        self.resume_button.setObjectName("train_resume")
        self.resume_button.setToolTip("Continue the stopped or failed run shown here from its newest checkpoint")
        self.kill_button = QPushButton("Kill")
        self.kill_button.setObjectName("train_kill")
        self.kill_button.setToolTip("End the trainer and all its processes now (nothing more is saved)")
        self.message = QLabel()
        self.message.setObjectName("train_message")
        self.message.setWordWrap(True)
        self.estimate = QLabel()
        self.estimate.setObjectName("train_estimate")
        self.header = RunHeader()
        self.banner = ErrorBanner()
        self.plots = RunPlots()
        self.samples = SamplesGallery()
        self.console = ConsolePane()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.plots, "Plots")
        self.tabs.addTab(self.samples, "Samples")
        self.tabs.addTab(self.console, "Console")
        self.sampling = SamplingEditor(context)
        self.tabs.addTab(self.sampling, "Sample settings")

        buttons = QHBoxLayout()
        for button in (self.train_button, self.resume_button, self.stop_button, self.kill_button):
            buttons.addWidget(button)
        buttons.addWidget(self.estimate, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.message)
        layout.addWidget(self.header)
        layout.addWidget(self.banner)
        layout.addWidget(self.tabs, 1)

        self.train_button.clicked.connect(self.start_training)
        self.stop_button.clicked.connect(self.stop_training)
        self.resume_button.clicked.connect(self.resume_training)
        self.kill_button.clicked.connect(self.kill_training)
        self.banner.sig_show_console.connect(self._jump_to_console)
        ctl = self.controller
        ctl.sig_tick.connect(self._refresh)
        ctl.sig_run_started.connect(self._on_run_started)
        ctl.sig_run_ended.connect(self._on_run_ended)
        ctl.sig_message.connect(self.show_message)
        ctl.sig_console.connect(self.console.append)
        ctl.sig_progress.connect(self.console.set_progress)
        context.sig_project_changed.connect(self._on_project)
        context.sig_config_changed.connect(self._on_config)
        context.sig_demo_model_built.connect(self._on_demo_model_built)
        # Train was pressed before the environment or the demo's model was there: it goes on by itself.
        self._env_dialog: TrainingEnvDialog | None = None
        self._waiting_for_env = False
        self._waiting_for_demo_model = False
        self._stopping = False
        # The header's clock goes on between events (a big model loading, a checkpoint saving: minutes of silence).
        self._clock = QTimer(self)
        self._clock.setInterval(1000)
        self._clock.timeout.connect(lambda: self.header.refresh(self.controller.model, self._stopping))
        self._update_buttons()
        if context.project is not None:
            self._on_project(context.project)
        if context.config is not None:  # what the gallery says before the first samples
            self._on_config(context.config)
        if controller.running and controller.run_dir is not None:  # built after a run was found again
            self._on_run_started(controller.run_dir)
        else:  # built after the project's newest run was read (the window builds its pages one by one): show it
            self._refresh()

    # ------------------------------------------------------------ state
    def _on_project(self, project: Project | None) -> None:
        # A Train pressed for the project before, waiting on the training environment or the demo's model,
        # starts nothing in this one.
        self._waiting_for_env = self._waiting_for_demo_model = False
        if self.controller.running:  # the run goes on, shown here, whichever project is open
            if self.controller.queue is None and project is not None:
                self.controller.set_project_root(project.root)  # a run found again at start: its project's queue
            return
        self.controller.set_project_root(project.root if project else None)
        # What the project before said (its run's outcome, its VRAM estimate, its console, its error) goes;
        # the run shown is this project's newest (RunController.show_last_run), or none.
        self.message.setText("")
        self.estimate.setText("")
        self.console.clear()
        self.banner.clear()
        self._update_buttons()

    def _on_config(self, config: TrainConfig) -> None:
        if self.controller.model.started is None:  # no run shown yet: what the next one will sample
            self.samples.show_waiting(config.sampling.model_dump())

    def resumable(self) -> bool:
        """The run shown stopped or failed here (not one copied back from another machine)."""
        run_dir, model = self.controller.run_dir, self.controller.model
        return (not self.controller.running and run_dir is not None and model.status in ("stopped", "failed")
                and model.step > 0 and not ran_elsewhere(run_dir))

    def resume_training(self) -> bool:
        """Resume the run shown, from its newest checkpoint (as Runs → Resume does)."""
        run_dir = self.controller.run_dir
        if run_dir is None or not self.resumable():
            return False
        if not run_dir.is_dir():  # deleted or moved outside the studio since it was shown
            self.controller.show_last_run(self.context.runs_dir() if self.context.project else None)
            self.show_message(f"{run_dir} no longer exists (deleted or moved): there is nothing to resume.")
            return False
        note = resume_note(run_dir, self.context.project_config())
        if not self.controller.resume(run_dir):
            return False
        if note:
            self.show_message(note)
        return True

    def _update_buttons(self) -> None:
        running = self.controller.running
        self._update_resume()
        self.train_button.setEnabled(not running)
        self.stop_button.setEnabled(running and not self._stopping)
        self.kill_button.setEnabled(running)
        self.sampling.show_running(running)

    def show_message(self, text: str) -> None:
        self.message.setText(text)
        self.context.status(text)

    def _refresh(self) -> None:
        model = self.controller.model
        self.plots.refresh(model, stagger=self.controller.running)
        self.header.refresh(model, self._stopping)
        self.banner.refresh(model)
        self.samples.refresh(model)
        self._update_resume()

    def _update_resume(self) -> None:
        self.resume_button.setEnabled(self.resumable())
        failed_at_start = self.controller.model.status == "failed" and self.controller.model.step == 0
        self.resume_button.setToolTip(
            "This run failed before its first step: there is nothing to resume. Fix what the error above says "
            "and press Train for a new run." if failed_at_start and not self.controller.running
            else "Continue the stopped or failed run shown here from its newest checkpoint")

    def _on_run_started(self, run_dir: Path) -> None:
        self._stopping = False
        self.banner.clear()
        self.console.clear()
        self.show_message(f"Training in {run_dir}")
        self.plots.use_sampler(self.controller.gpu_sampler)  # a remote run's GPUs, or this machine's
        if self.plots.sampler is not None:
            self.plots.sampler.start()
        self._clock.start()
        self._update_buttons()
        self._refresh()

    def _on_run_ended(self, status: str) -> None:
        self._stopping = False
        self._clock.stop()
        if self.plots.sampler is not None:
            self.plots.sampler.stop()
        model = self.controller.model
        self._refresh()
        self._update_buttons()
        where = model.run_dir.name if model.run_dir else ""
        self.show_message(f"Run {where} {status}." + (f" {model.message}" if model.message else ""))

    def _jump_to_console(self, needle: str) -> None:
        self.tabs.setCurrentWidget(self.console)
        self.console.jump_to(needle)

    # ------------------------------------------------------------ actions
    def check_config(self) -> tuple[ResolvedConfig | None, str]:
        """The config to train (its paths resolved against the project), or why there is none (said the
        way the person can fix it)."""
        ctx = self.context
        if ctx.project is None:
            return None, "Open or create a project first (File menu)."
        if ctx.config is None:
            detail = ctx.config_error.describe() if ctx.config_error else "the config could not be read"
            return None, f"The config {ctx.project.config_path} has errors:\n{detail}"
        try:
            return ctx.resolved_config(ctx.config), ""
        except ConfigError as exc:
            problems = "\n".join(f"  - {issue}" for issue in exc.issues)
            return None, (f"A path of the project's settings cannot be used:\n{problems}\n"
                          "Fix it on the Model & Preset page (or in studio.toml).")

    def preflight(self, config: ResolvedConfig) -> list[PreflightProblem]:
        """What stands in the way of this run, checked before anything starts (core/project/preflight.py)."""
        assert self.context.project is not None
        root = self.context.project.root
        try:
            report = load_hardware(self.context.hardware_file, disk_path=root)
        except HardwareProfileError as exc:  # the estimate only informs: the run may start without one
            self.estimate.setText(f"⚠ No VRAM estimate (the run starts without one): {exc}")
            return preflight(config, None)
        gpu, gpu_count = report.run_gpus(config.launch)
        if gpu is not None and not self._show_estimate(config, gpu):
            gpu = None
        # A profile plans for another machine: this machine's torch is only asked about its own GPU.
        local = not report.source.startswith("profile:")
        problems = [p for p in (check_gpu_ids(config, report),) if p is not None]
        return problems + preflight(config, gpu, check_torch=local, gpu_count=gpu_count, ram_mb=report.ram_mb)

    def _show_estimate(self, config: ResolvedConfig, gpu: GPUInfo) -> bool:
        """Show the VRAM estimate for `gpu`; False (and why) when the estimator's data cannot be read."""
        try:
            need = estimate_vram(config, gpu).total_mb
        except ArchitectureDataError as exc:
            self.estimate.setText(f"⚠ No VRAM estimate (the run starts without one): {exc}")
            return False
        self.estimate.setText(f"Estimated VRAM {memory_text(need)} of {gpu.total_mb / 1024:.1f} GB")
        return True

    def start_training(self) -> bool:
        """Train, in the order a person meets it: the training environment, the demo's model, the checks."""
        config, problem = self.check_config()
        if config is None:
            self.show_message(problem)
            self.banner.show_error("Cannot start the training", problem)
            return False
        pending = self.context.pending_edits()  # shown in the pages, not in studio.toml: the run would not have them
        if pending and not self.confirm("Settings not saved", f"Edits shown are not in the project's settings "
                                        f"({'; '.join(pending)}): the run trains studio.toml as it is, without "
                                        "them.\n\nStart anyway? (No: correct or complete them first.)"):
            self.show_message(f"Not started: edits are not saved ({'; '.join(pending)}).")
            return False
        if needs_training_env(config.launch.python):
            # The first Train of the desktop app: it has no PyTorch of its own until the person sets it up.
            self._train_when_env_ready(open_training_env_dialog(self.window()))
            self.show_message("Set up the training environment first: training starts when it is ready.")
            return False
        assert self.context.project is not None
        if (is_demo_project(self.context.project) and is_demo_model(config.model.base)
                and not demo_model_ready(self.context.project)):
            self._waiting_for_demo_model = True
            self.show_message("Building the demo's tiny model first (under a minute; its progress is in the "
                              "banner above); training starts when it is built.")
            self.context.sig_demo_model_wanted.emit(self.context.project)
            return False
        problems = self.preflight(config)
        blocking = [p for p in problems if not p.can_confirm]
        if blocking:
            text = "\n".join(f"• {p}" for p in blocking)
            self.show_message(text)
            self.banner.show_error("Cannot start the training", text)
            return False
        for found in problems:
            if found.download is not None:
                if self.confirm("Download the base model?", f"{found}\n\nDownload it now? Training starts "
                                                            "when the download is done."):
                    self.download_then_train(found.download)
                return False
            if not self.confirm(found.question, f"{found}\n\nStart anyway?"):
                return False
        others = find_live_runs(self.context.runs_dir())
        if others and not self.confirm("The GPU is busy", busy_message(others)):
            return False
        run_dir = self.controller.start_config(config)
        self._update_buttons()
        return run_dir is not None

    def _train_when_env_ready(self, dialog: TrainingEnvDialog) -> None:
        if dialog is not self._env_dialog:
            self._env_dialog = dialog
            dialog.sig_ready.connect(self._on_env_ready)
        self._waiting_for_env = True

    def _on_env_ready(self, _python: str) -> None:
        if self._waiting_for_env and not self.controller.running:
            self._waiting_for_env = False
            self.start_training()

    def _on_demo_model_built(self, ok: bool) -> None:
        if not self._waiting_for_demo_model:
            return
        self._waiting_for_demo_model = False
        if ok and not self.controller.running:
            self.start_training()
        elif not ok:
            self.show_message("The demo's tiny model could not be built: the status bar and the demo banner say "
                              "why.")

    def download_then_train(self, repo_id: str) -> DownloadDialog:
        dialog = DownloadDialog(repo_id, with_t5=bool(self.context.config and self.context.config.model.use_t5),
                                parent=self)
        project = self.context.project  # another project opened meanwhile is not trained unasked
        dialog.sig_done.connect(lambda _id, _path: self.start_training() if self.context.project is project else None)
        self.download_dialog = dialog
        dialog.show()
        dialog.start()
        return dialog

    def stop_training(self) -> None:
        if self.controller.stop():
            self._stopping = True
            self.show_message("Stopping at the next step (a checkpoint is saved)…" + self.controller.queue_goes_on_note())
            self._update_buttons()
            self.header.refresh(self.controller.model, True)

    def kill_training(self) -> None:
        self.controller.kill()
        self.show_message("Ending the trainer's processes…")

    def _confirm_dialog(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    # ------------------------------------------------------------ page interface
    def can_close(self) -> bool:
        if not self.controller.running:
            return True
        answer = self.ask_close()
        if answer == "keep":
            self.detach_on_close = True
            return True
        if answer == "stop":
            self.controller.stop(hold_queue=True)
            if not wait_for(lambda: not self.controller.running, STOP_WAIT_S, interval_ms=50):
                self.controller.kill_now()  # shutdown() would do it; say why in the log
                self.controller.sig_console.emit("[studio] the trainer did not stop in time; ended it")
            return True
        return False

    def _close_dialog(self) -> str:
        box = QMessageBox(self)
        box.setWindowTitle("A training is running")
        box.setText(self.controller.close_question())
        stop = box.addButton("Stop training", QMessageBox.ButtonRole.DestructiveRole)
        keep = box.addButton("Keep running", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        clicked = box.clickedButton()
        return "keep" if clicked is keep else "stop" if clicked is stop else "cancel"

    def shutdown(self) -> None:
        self._clock.stop()
        self.close_plots()
        self.controller.shutdown(detach=self.detach_on_close)

    def close_plots(self) -> None:
        """Empty the run plots' scenes before the page is deleted."""
        self.plots.close_plots()

    def self_test(self, options: SelfTestOptions) -> dict[str, Any]:
        return page_self_test(self, options)
