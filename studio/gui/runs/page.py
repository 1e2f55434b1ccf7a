"""The Runs page: every run of the project, replay, loss overlay, resume, delete, queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.core.app_words import cli_command
from studio.core.cloud.api import CloudError
from studio.core.cloud.launcher import cloud_api
from studio.core.cloud.run import pull_command, read_cloud_record, request_cloud_stop
from studio.core.project.folder import Project
from studio.core.remote.control import pull_and_close, read_record
from studio.core.remote.machines import MachineError
from studio.core.remote.ssh import RemoteError
from studio.core.remote.transfer import TransferReport
from studio.core.runs.folders import OUTPUT_DIR
from studio.core.runs.live import live_trainer, stop_live_run
from studio.core.runs.records.history import RunSummary, delete_runs, import_run, list_runs, replay_to_show
from studio.core.runs.records.outcome import shown_text
from studio.core.runs.records.run_model import Replay, RunModel, replay_run
from studio.core.runs.run_settings import resume_note
from studio.core.text import plural
from studio.gui.base.desktop import open_with_desktop
from studio.gui.base.layout_state import remember_splitter
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext
from studio.gui.page import Page
from studio.gui.runner.remote_run import RemoteRun
from studio.gui.runner.run_controller import RunController
from studio.gui.runner.worker import Job, Worker
from studio.gui.runs.queue import QueuePanel
from studio.gui.runs.table import RunsTable
from studio.gui.widgets.loss_plot import LossOverlay
from studio.gui.widgets.run_header import RunHeader
from studio.gui.widgets.run_plots import RunPlots
from studio.gui.widgets.samples_gallery import SamplesGallery

NOTHING_TO_RESUME = ("This run failed before its first step: there is nothing to resume. Fix what its error "
                     "says and press Train on the Train page for a new run.")


class RunsPage(Page):
    title = "Runs"
    page_id = "page_runs"

    def __init__(self, context: StudioContext, controller: RunController, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self.controller = controller
        # Asked before deleting; tests replace it.
        self.confirm: Callable[[str, str], bool] = self._confirm_dialog
        # Told what an import left out (it stays up while the run's replay replaces the status line).
        self.inform: Callable[[str, str], None] = self._inform_dialog
        self.table = RunsTable()
        self.message = QLabel()
        self.message.setObjectName("runs_message")
        self.message.setWordWrap(True)
        self.header = RunHeader()
        self.plots = RunPlots(live=False)
        self.overlay = LossOverlay()
        # The run's sample images: an older run's, or one brought back from another machine, are seen nowhere else.
        self.samples = SamplesGallery()
        self.queue = QueuePanel(self.controller)
        self.queue.sig_compare.connect(self.select_runs)
        self.views = QTabWidget()
        self.views.addTab(self.plots, "Run")
        self.views.addTab(self.samples, "Samples")
        self.views.addTab(self.overlay, "Loss overlay")
        self.views.addTab(self.queue, "Queue")

        self.buttons: dict[str, QPushButton] = {}
        row = QHBoxLayout()
        for key, text, slot in (
            ("refresh", "Refresh", self.refresh),
            ("open", "Open", self.open_selected),
            ("overlay", "Overlay loss", self.overlay_selected),
            ("output", "Output folder", self.open_output),
            ("resume", "Resume", self.resume_selected),
            ("stop", "Stop", self.stop_selected),
            ("pull", "Bring back", self.pull_selected),
            ("delete", "Delete…", self.delete_selected),
            ("import", "Import run…", self._pick_import),
        ):
            button = QPushButton(text)
            button.setObjectName(f"runs_{key}")
            button.clicked.connect(slot)
            self.buttons[key] = button
            row.addWidget(button)
        row.addStretch(1)

        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addLayout(row)
        top_layout.addWidget(self.table, 1)
        bottom = QWidget()
        bottom_layout = QVBoxLayout(bottom)
        bottom_layout.setContentsMargins(0, 0, 0, 0)
        bottom_layout.addWidget(self.header)
        bottom_layout.addWidget(self.views, 1)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setObjectName("runs_splitter")
        splitter.addWidget(top)
        splitter.addWidget(bottom)
        splitter.setCollapsible(0, False)
        self.splitter = splitter
        remember_splitter(splitter, context.settings, "runs_splitter", [260, 420])
        self.table.remember_layout(context.settings)
        layout = QVBoxLayout(self)
        layout.addWidget(self.message)
        layout.addWidget(splitter, 1)

        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.doubleClicked.connect(lambda _index: self.open_selected())
        self.controller.sig_run_ended.connect(lambda _status: self.refresh())
        self.controller.sig_run_started.connect(lambda _path: self.refresh())
        self.controller.sig_message.connect(self.message.setText)
        context.sig_project_changed.connect(self._on_project)
        self.opened: RunModel | None = None
        self.worker = Worker(self)  # bringing remote runs back
        self.reader = Worker(self)  # replays and overlays: run folders read off the GUI thread
        self._reading: Job | None = None
        if context.project is not None:
            self._on_project(context.project)
        self._update_buttons()

    # ------------------------------------------------------------ state
    def _on_project(self, project: Project | None) -> None:
        if project is not None and not self.controller.running:
            self.controller.set_project_root(project.root)
        # The run shown below the list is this project's newest, or none: never the project before's.
        if self._reading is not None:
            self._reading.cancel()
            self._reading = None
        self._show_empty()
        self.refresh()
        if self.table.rowCount():
            self.table.selectRow(0)  # newest first; choosing it shows it

    def _show_empty(self) -> None:
        self.opened = None
        empty = RunModel()
        self.plots.refresh(empty)
        self.header.refresh(empty)
        self.samples.refresh(empty)

    def select_runs(self, names: list[str]) -> None:
        """Select these runs together in the table (a sweep's), ready to compare (Loss overlay)."""
        self.refresh()
        self.table.select_paths(names)
        self._update_buttons()
        # A run deleted, or written to another runs folder (a config queued from elsewhere): named, not left out
        # without a word (all of them: the button did nothing).
        chosen = {s.name for s in self.table.selected()}
        missing = [name for name in names if name not in chosen]
        gone = (f"Not in {self.runs_dir()} (deleted, moved or written to another output.dir): {', '.join(missing)}. "
                if missing else "")
        self.say(gone + (f"{plural(len(chosen), 'run')} of the sweep selected: press Overlay loss to compare them."
                         if chosen else ""))

    def runs_dir(self) -> Path | None:
        ctx = self.context
        if ctx.project is None:
            return None
        return ctx.project.resolve(ctx.config.output.dir) if ctx.config else ctx.project.runs_dir

    def refresh(self) -> None:
        folder = self.runs_dir()
        self.table.set_runs(list_runs(folder) if folder else [])
        self._update_buttons()

    def _selection_changed(self) -> None:
        """A click on a run shows it; the same run chosen again (a refresh) is not read again."""
        self._update_buttons()
        chosen = self._one()
        shown = self.opened.run_dir if self.opened is not None else None
        if chosen is not None and chosen.path != shown:
            self.open_run(chosen.path)

    def _update_buttons(self) -> None:
        chosen = self.table.selected()
        one = len(chosen) == 1
        self.buttons["open"].setEnabled(one)
        self.buttons["overlay"].setEnabled(len(chosen) >= 1)
        self.buttons["output"].setEnabled(one)
        self.buttons["resume"].setEnabled(one and chosen[0].resumable and not self.controller.running)
        remote = one and chosen[0].remote
        self.buttons["resume"].setToolTip(
            "This run was copied back from another machine: resume it there (with its bundle)." if remote
            else NOTHING_TO_RESUME if one and chosen[0].status == "failed" and chosen[0].steps == 0
            else "Continue the selected stopped or failed run from its newest checkpoint"
        )
        in_progress = self.controller.running and one and chosen[0].path == self.controller.run_dir
        self.buttons["pull"].setEnabled(one and bool(chosen[0].machine) and not self.worker.busy and not in_progress)
        self.buttons["pull"].setToolTip("Bring this run's folder back from its machine (checkpoints stay there)")
        self.buttons["delete"].setEnabled(bool(chosen) and all(s.status != "running" for s in chosen))
        self.buttons["stop"].setEnabled(one and chosen[0].status == "running")
        self.buttons["stop"].setToolTip("Stop the selected run at its next step (a checkpoint is saved)")
        self.buttons["import"].setEnabled(self.context.project is not None)

    def say(self, text: str) -> None:
        self.message.setText(text)
        self.context.status(text)

    def _one(self) -> RunSummary | None:
        chosen = self.table.selected()
        return chosen[0] if len(chosen) == 1 else None

    # ------------------------------------------------------------ actions
    def open_run(self, run_dir: Path) -> bool:
        """Replay a run into this page's plots (read on the reader; shown when it arrives); False if it is gone."""
        if self._gone(run_dir):
            return False
        # The run this studio follows now (on a cloud, say: no trainer here) is shown as it stands; any other
        # whose events end without run_finished and whose trainer is gone is shown ended.
        followed = self.controller.running and run_dir == self.controller.run_dir
        self._read(replay_run if followed else replay_to_show, run_dir,
                   on_done=lambda rep: self._show_replay(run_dir, rep))
        return True

    def _gone(self, run_dir: Path) -> bool:
        """A run folder deleted or moved outside the studio since the list was read: said, and the list read again."""
        if run_dir.is_dir():
            return False
        self.say(f"{run_dir} no longer exists (deleted or moved); the list is refreshed.")
        self.refresh()
        return True

    def _read(self, function: Callable[..., Any], *args: Any, on_done: Callable[[Any], None]) -> None:
        """One read at a time: a newer choice drops the result of the one before."""
        if self._reading is not None:
            self._reading.cancel()
        self.say("Reading…")
        self._reading = self.reader.run(function, *args, on_done=on_done, expected=(OSError,),
                                        on_failed=lambda error: self.say(f"Cannot read the run: {error}"))

    def _show_replay(self, run_dir: Path, rep: Replay) -> None:
        self.opened = rep.model
        self.plots.refresh(rep.model)
        self.header.refresh(rep.model)
        self.samples.refresh(rep.model)
        if self.views.currentWidget() is not self.samples:  # a person going through runs' samples stays on them
            self.views.setCurrentWidget(self.plots)
        extra = f", {rep.garbage_lines} unreadable lines skipped" if rep.garbage_lines else ""
        self.say(f"Showing {run_dir.name}: {shown_text(rep.model)}{extra}.")

    def open_selected(self) -> None:
        chosen = self._one()
        if chosen is None:
            return
        if chosen.machine and chosen.status == "running":
            self.follow_remote(chosen.path)
        else:
            self.open_run(chosen.path)

    def follow_remote(self, run_dir: Path) -> bool:
        """Follow a run that goes on on its machine (started earlier, perhaps before the studio restarted)."""
        if self.controller.running:
            self.say(self.controller.busy_message())
            return False
        try:
            remote = RemoteRun(run_dir)
        except (RemoteError, MachineError) as exc:
            self.say(f"Cannot follow {run_dir.name}: {exc}")
            return False
        if not self.controller.follow_remote(remote):
            remote.deleteLater()
            return False
        self.say(f"Following {run_dir.name} on {remote.record.machine}; its plots are on the Train page.")
        return True

    def pull_selected(self) -> None:
        chosen = self._one()
        if chosen is None or not chosen.machine:
            return
        try:
            record = read_record(chosen.path)
        except RemoteError as exc:
            self.say(f"Cannot bring {chosen.name} back: {exc}")
            return
        self.say(f"Bringing {chosen.name} back from {record.machine}…")
        self.worker.run(pull_and_close, record, chosen.path, on_done=lambda report: self._pulled(chosen, report),
                        on_failed=lambda error: self.say(f"{chosen.name} did not come back: {error}"),
                        expected=(RemoteError, MachineError, OSError))
        self._update_buttons()

    def _pulled(self, summary: RunSummary, report: TransferReport) -> None:
        self.say(f"{summary.name}: {len(report.copied)} file(s) brought back from {summary.machine}, "
                 f"{report.unchanged} already here.")
        self.refresh()

    def overlay_selected(self) -> None:
        chosen = [(s.name, s.path) for s in self.table.selected()]
        self._read(_read_models, chosen, on_done=lambda runs: self._show_overlay(runs, [n for n, _p in chosen]))

    def _show_overlay(self, runs: list[tuple[str, RunModel]], asked: list[str]) -> None:
        self.overlay.show_runs(runs, self.plots.loss.smoothing)
        self.views.setCurrentWidget(self.overlay)
        gone = [name for name in asked if name not in {n for n, _m in runs}]  # deleted or moved outside the studio
        self.say(f"Comparing {plural(len(runs), 'run')}" + (f"; {', '.join(gone)} no longer exist"
                 f"{'s' if len(gone) == 1 else ''} (deleted or moved; Refresh reads the list again)." if gone else "."))

    def open_output(self) -> None:
        chosen = self._one()
        if chosen is None or self._gone(chosen.path):
            return
        target = Path(chosen.outputs[0]).parent if chosen.outputs else chosen.path / OUTPUT_DIR
        if not target.exists():
            target = chosen.path
        open_with_desktop(self, target, "the run's output folder")

    def _stop_on_cloud(self, chosen: RunSummary) -> bool:
        try:
            record = read_cloud_record(chosen.path)
        except CloudError as exc:
            self.say(f"Cannot stop {chosen.name}: {exc}")
            return False
        pull = pull_command(record)

        def asked(found: bool) -> None:
            self.say(f"Asked {chosen.name} on {record.cluster} to stop: it saves a checkpoint and ends; bring it back "
                     f"with: {pull}" if found else f"{record.cluster} holds no run yet (still being set up): end it "
                     f"with: {cli_command(['cloud', 'down', record.cluster])}")

        self.say(f"Asking {chosen.name} on {record.cluster} to stop…")
        self.worker.run(lambda: request_cloud_stop(cloud_api(), record.cluster), on_done=asked,
                        on_failed=lambda error: self.say(f"Cannot stop {chosen.name}: {error}"),
                        expected=(CloudError, OSError))
        return True

    def resume_selected(self) -> bool:
        chosen = self._one()
        if chosen is None or not chosen.resumable or self._gone(chosen.path):
            return False
        note = resume_note(chosen.path, self.context.project_config())
        ok = self.controller.resume(chosen.path)
        if ok:
            self.say(f"Resuming {chosen.name}; follow it on the Train page. {note}".strip())
        return ok

    def stop_selected(self) -> bool:
        """Stop a live run: the one the Train page follows, or one started elsewhere (a STOP file either way)."""
        chosen = self._one()
        if chosen is None or chosen.status != "running":
            return False
        then = ""
        if self.controller.running and self.controller.run_dir == chosen.path:
            then = self.controller.queue_goes_on_note()
            stopped = self.controller.stop()
        elif chosen.machine:  # its trainer is on another machine: no STOP file here reaches it
            self.say(f"{chosen.name} trains on {chosen.machine}: open it (Open) to follow it, then press Stop on the "
                     "Train page.")
            return False
        elif chosen.remote:  # on a cloud cluster, followed by no window: its STOP file is written there
            return self._stop_on_cloud(chosen)
        else:
            live = live_trainer(chosen.path)
            if live is not None:
                stop_live_run(live)
            stopped = live is not None
        self.say(f"Stopping {chosen.name} at its next step (a checkpoint is saved)…{then}" if stopped
                 else f"{chosen.name} is no longer running.")
        self.buttons["stop"].setEnabled(False)
        return stopped

    def delete_selected(self) -> None:
        chosen = [s for s in self.table.selected() if s.status != "running"]
        if not chosen:
            return
        names = "\n".join(s.name for s in chosen)
        if not self.confirm("Delete runs", f"Delete these runs (samples, checkpoints and outputs)?\n\n{names}"):
            return
        done, stopped = delete_runs(chosen)
        self.say(" ".join(part for part in (stopped, "Deleted: " + ", ".join(done) if done else "") if part))
        self.refresh()
        gone = {s.path for s in chosen if not s.path.exists()}
        if self.controller.run_dir in gone and not self.controller.running:
            self.controller.show_last_run(self.runs_dir())  # the Train page no longer offers to resume it
        if self.opened is not None and self.opened.run_dir in gone:
            self._show_empty()

    def import_path(self, source: Path) -> Path | None:
        folder = self.runs_dir()
        if folder is None:
            self.say("Open a project first: imported runs go into its runs folder.")
            return None
        left_out: list[str] = []  # a link leading outside the run, a FIFO: named, the rest imported
        try:
            dest = import_run(source, folder, left_out.append)
        except (OSError, ValueError) as exc:
            self.say(f"Could not import {source}: {exc}")
            return None
        self.refresh()
        self.open_run(dest)
        if left_out:
            self.inform("Run imported without some entries",
                        f"{dest.name} was imported into {folder} without "
                        f"{plural(len(left_out), 'entry', 'entries')}:\n\n" + "\n\n".join(left_out))
        return dest

    def _pick_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a run (.zip) copied back from another machine",
                                              self.context.dialog_folder(), "Run archive (*.zip)")
        if not path:
            path = QFileDialog.getExistingDirectory(self, "Or import a run folder", self.context.dialog_folder())
        if path:
            self.import_path(Path(path))

    def _inform_dialog(self, title: str, text: str) -> None:
        QMessageBox.warning(self, title, text)

    def _confirm_dialog(self, title: str, text: str) -> bool:
        return QMessageBox.question(self, title, text) == QMessageBox.StandardButton.Yes

    def shutdown(self) -> None:
        self.worker.wait(60.0)
        self.reader.shutdown(60.0)
        self.close_plots()

    def close_plots(self) -> None:
        """Empty the run plots' and the overlay's scenes before the page is deleted."""
        self.plots.close_plots()
        self.overlay.close_plot()

    def self_test(self, options: SelfTestOptions) -> dict[str, Any]:
        self.refresh()
        return {"runs": len(self.table.summaries), "runs_rows_visible": self.table.visible_rows()}


def _read_models(runs: list[tuple[str, Path]]) -> list[tuple[str, RunModel]]:
    """The model of each run folder still there (on the reader's thread)."""
    return [(name, replay_run(path).model) for name, path in runs if path.is_dir()]
