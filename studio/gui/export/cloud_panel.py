"""The Export page's "Launch on a cloud": this project's bundle on the cheapest GPUs SkyPilot finds.

Launch exports a bundle for the launch (the studio's data folder, cloud/), asks SkyPilot for its
price and availability (shown beside the studio's own cost table), asks the person, and starts
the bundle's sky.yaml on a new cluster. The run is then followed on the Train page (a CloudRun),
brought back into the project's runs/ when it ends and the cluster torn down. Without SkyPilot
the button says how to get it, and "Install SkyPilot…" makes a cloud environment of the studio's
own with it (core/cloud/environment.py: the desktop app carries no SkyPilot). Every call to the launcher runs on the panel's Worker;
the person's cloud credentials stay in SkyPilot's own configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGroupBox, QLabel, QMessageBox, QProgressBar, QPushButton, QVBoxLayout, QWidget

from studio.core.app_words import cli_command
from studio.core.cloud.api import CloudApi, CloudError, Offer
from studio.core.cloud.environment import cloud_env_dir, install_cloud_env
from studio.core.cloud.launcher import cloud_api, cloud_available
from studio.core.cloud.run import (
    CloudBundle,
    export_for_cloud,
    hand_launch_command,
    launch_bundle,
    new_record,
    refuse_if_running,
    write_cloud_record,
    write_launch_record,
)
from studio.core.config.errors import ConfigError
from studio.core.export.bundle import ExportError
from studio.core.export.gpu_catalogue import CatalogueError
from studio.core.export.sky_task import CloudOptions
from studio.core.runs.folders import new_run_dir
from studio.gui.base.names import named
from studio.gui.context import StudioContext
from studio.gui.runner.cloud_run import STATE_MS, CloudRun
from studio.gui.runner.worker import Worker

EXPECTED = (CloudError, ExportError, CatalogueError, ConfigError, OSError)


@dataclass(frozen=True)
class Quote:
    bundle: CloudBundle
    offers: list[Offer]
    gpus: int


def _quote(api: CloudApi, config_path: Path, options: dict[str, Any]) -> Quote:
    bundle = export_for_cloud(config_path, **options)
    refuse_if_running(api, bundle)
    return Quote(bundle, api.offers(bundle.task_file), int(options["gpus"]) * int(options["nodes"]))


class CloudPanel(QGroupBox):
    sig_started = Signal(object)  # the CloudRun the controller follows
    sig_install_line = Signal(str)  # a line of SkyPilot's install, from the worker's thread

    def __init__(self, context: StudioContext, options: Callable[[], dict[str, Any]],
                 parent: QWidget | None = None) -> None:
        super().__init__("Launch on a cloud (SkyPilot)", parent)
        self.context = context
        self._options = options
        self.worker = Worker(self)
        self.api: CloudApi | None = None
        self.quote: Quote | None = None
        self.run: CloudRun | None = None
        # Asked before anything is started (tests answer for the person).
        self.confirm: Callable[[str], bool] = self._confirm_dialog
        self.state_ms: int | None = None  # how often the run asks SkyPilot about the job (tests: often)
        self.launch_button = named(QPushButton("Launch on a cloud…"), "export_cloud_launch")
        self.launch_button.clicked.connect(self.launch)
        self.install_button = named(QPushButton("Install SkyPilot…"), "export_cloud_install")
        self.install_button.setToolTip(f"Makes a Python environment of its own with SkyPilot in {cloud_env_dir()} "
                                       "(a few minutes, downloads about 200 MB)")
        self.install_button.clicked.connect(self.install_skypilot)
        self.progress = named(QProgressBar(), "export_cloud_progress")
        self.progress.setVisible(False)
        self.status = named(QLabel("Rents the GPUs chosen above from the cheapest cloud SkyPilot can reach; "
                                   "your cloud credentials stay in SkyPilot's configuration."), "export_cloud_status")
        self.status.setWordWrap(True)
        self.sig_install_line.connect(lambda line: self.status.setText(f"Installing SkyPilot… {line[-160:]}"))
        # Placed by the page beside its cost table: SkyPilot's live answer next to the catalogue's figures.
        self.offer_label = named(QLabel(), "export_cloud_offers")
        self.offer_label.setWordWrap(True)
        self.offer_label.setVisible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.launch_button)
        layout.addWidget(self.install_button)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        self.update_enabled()

    def update_enabled(self) -> None:
        hint = cloud_available()
        self.launch_button.setToolTip(hint or "Export the bundle, show SkyPilot's price, then ask before starting")
        ready = self.context.project is not None and self.context.config is not None
        # Without SkyPilot the button stays clickable: it says how to enable it.
        self.launch_button.setEnabled(not self.worker.busy and (ready or hint is not None))
        self.install_button.setVisible(hint is not None)
        self.install_button.setEnabled(not self.worker.busy)

    def install_skypilot(self) -> None:
        self._busy("Installing SkyPilot into a cloud environment of its own…")
        self.worker.run(install_cloud_env, None, None, self.sig_install_line.emit, on_done=self._installed,
                        on_failed=self._install_failed, expected=EXPECTED)

    def _installed(self, python: Path) -> None:
        self._idle()
        self.say(f"SkyPilot is ready ({python}). Enable a cloud once with `{python.parent / 'sky'} check`, "
                 "then Launch on a cloud.")

    def _install_failed(self, error: BaseException) -> None:
        self._idle()
        self.say(f"SkyPilot was not installed: {error}")

    def say(self, text: str) -> None:
        self.status.setText(text)
        self.context.status(text.splitlines()[0] if text else "")

    # ------------------------------------------------------------ launch
    def launch(self) -> None:
        hint = cloud_available()
        if hint is not None:
            self.say(f"Cannot launch on a cloud yet. {hint}.")
            return
        project = self.context.project
        if project is None or self.context.config is None:
            return
        if self.context.run_controller.running:
            self.say(self.context.run_controller.busy_message())
            return
        try:
            self.api = cloud_api()
        except CloudError as exc:
            self.say(str(exc))
            return
        options = self._options()
        self._busy("Writing the bundle for the cloud and asking SkyPilot for a price…")
        self.worker.run(_quote, self.api, project.config_path, options, on_done=self._quoted,
                        on_failed=self._failed, expected=EXPECTED)

    def _quoted(self, quote: Quote) -> None:
        self._idle()
        self.quote = quote
        catalogue = quote.bundle.catalogue_price(quote.gpus)
        if not quote.offers:
            self.show_offers(f"{catalogue}\nSkyPilot: no enabled cloud offers these GPUs now (run `sky check`, "
                             "or choose another GPU type).")
            self.say(f"Nothing was started. The bundle is in {quote.bundle.folder}.")
            return
        answer = "\n".join(f"SkyPilot's offer: {offer.describe()}" for offer in quote.offers[:3])
        self.show_offers(f"{answer}\n{catalogue}")
        best = quote.offers[0]
        if not self.confirm(f"Start {quote.bundle.cluster} on {best.describe()}?\n\nThe run is followed on the "
                            "Train page; when it ends (or you press Stop) it is brought back into this project's "
                            "runs and the cluster is ended."):
            self.say(f"Not started. The bundle is in {quote.bundle.folder}; "
                     f"start it later there with: {hand_launch_command(quote.bundle)}")
            return
        self._busy(f"Starting {quote.bundle.cluster} on {best.cloud} (setting up a machine takes minutes)…")
        assert self.api is not None
        self.worker.run(launch_bundle, self.api, quote.bundle, on_done=self._launched, on_failed=self._failed,
                        expected=EXPECTED)

    def show_offers(self, text: str) -> None:
        self.offer_label.setText(text)
        self.offer_label.setVisible(True)

    def _launched(self, job: int) -> None:
        self._idle()
        quote, project, config = self.quote, self.context.project, self.context.config
        assert quote is not None and self.api is not None
        if project is None or config is None:
            return
        try:
            local = new_run_dir(project.resolve(config.output.dir), config.output.name)
            record = new_record(quote.bundle.cluster, job, quote.bundle.folder)
            write_cloud_record(local, record)
            write_launch_record(quote.bundle, job, project.config_path)
        except OSError as exc:
            self.say(f"{quote.bundle.cluster} started (job {job}) but its run folder could not be written: {exc}; "
                     f"follow it with: {cli_command(['cloud', 'logs', quote.bundle.cluster])}")
            return
        run = CloudRun(local, record, self.api, state_ms=self.state_ms or STATE_MS)
        if self.context.run_controller.follow(run):
            self.run = run
            self.sig_started.emit(run)
            self.say(f"{quote.bundle.cluster} started (job {job}); follow it on the Train page.")
            self.context.status(f"Training on {quote.bundle.cluster}: follow it on the Train page")

    def _failed(self, error: BaseException) -> None:
        self._idle()
        text = error.describe() if isinstance(error, ConfigError) else str(error)
        self.say(f"Nothing was started: {text}")

    def _busy(self, text: str) -> None:
        self.say(text)
        self.progress.setRange(0, 0)
        self.progress.setVisible(True)
        self.launch_button.setEnabled(False)
        self.install_button.setEnabled(False)

    def _idle(self) -> None:
        self.progress.setVisible(False)
        self.update_enabled()

    def _confirm_dialog(self, question: str) -> bool:
        answer = QMessageBox.question(self, "Launch on a cloud", question)
        return answer == QMessageBox.StandardButton.Yes

    def shutdown(self) -> None:
        self.worker.wait(60.0)


def cloud_options(options: dict[str, Any]) -> dict[str, Any]:
    """The Export page's bundle options for a launch: the bundle is for the cloud, a local model goes in it."""
    keep = {k: options[k] for k in ("gpus", "nodes", "gpu_type", "include_dataset", "remote_dataset", "remote_base")}
    return {**keep, "include_model": options["remote_base"] is None, "cloud": CloudOptions()}
