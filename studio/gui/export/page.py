"""The Export page: a bundle for rented GPUs, with the time and cost of each GPU choice."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigError
from studio.core.config.schema import TrainConfig
from studio.core.export.bundle import BundleReport, ExportCancelled, ExportError, export_bundle, is_hub_id
from studio.core.export.bundle_plan import LocalModelError
from studio.core.export.cost import CostRow, assumptions, cost_table, vram_estimator, workload_from_config
from studio.core.export.gpu_catalogue import Catalogue, CatalogueError, ensure_user_catalogue, load_catalogue
from studio.core.project.folder import Project
from studio.gui.base.desktop import open_with_desktop
from studio.gui.base.names import named
from studio.gui.base.questions import confirm
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext
from studio.gui.export.cloud_panel import CloudPanel, cloud_options
from studio.gui.export.cost_table import CostTable
from studio.gui.export.remote_panel import RemotePanel
from studio.gui.page import Page
from studio.gui.runner.worker import Worker

COUNTS = (1, 2, 4, 8)
EXPORTS_DIR = "exports"

INCLUDE_MODEL_KEY = "export/include_model"

class ExportPage(Page):
    title = "Export"
    page_id = "page_export"

    def __init__(self, context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self.catalogue: Catalogue | None = None
        self.report: BundleReport | None = None
        self._base_is_local = False
        self.worker = Worker(self)
        self._cancel_requested = False  # read by the export on the worker's thread
        # Asked before the window closes during an export (it is cancelled then); tests replace it.
        self.confirm_close: Callable[[], bool] = lambda: confirm(
            self, "An export is being written", "Close the studio and cancel the export? What it has written so far "
            "is removed.", "Cancel the export and close")
        self._build()
        self._load_catalogue()
        context.sig_project_changed.connect(self._project_changed)
        context.sig_config_changed.connect(lambda _c: self.refresh())
        self.refresh()

    # ------------------------------------------------------------ layout

    def _build(self) -> None:
        self.gpu_combo = named(QComboBox(), "export_gpu_type")
        self.gpus_spin = named(QSpinBox(), "export_gpus")
        self.gpus_spin.setRange(1, 8)
        self.nodes_spin = named(QSpinBox(), "export_nodes")
        self.nodes_spin.setRange(1, 64)
        self.dataset_combo = named(QComboBox(), "export_dataset_mode")
        self.dataset_combo.addItems(["Copy the images into the bundle", "Manifest only (copy the images yourself)"])
        self.remote_dataset = named(QLineEdit(), "export_remote_dataset")
        self.remote_dataset.setPlaceholderText("where the images are on the remote machine (default: dataset/ in the bundle)")
        self.base_label = named(QLabel(), "export_base_label")
        self.base_label.setWordWrap(True)
        self.include_model = named(QCheckBox("Copy the local base model into the bundle"), "export_include_model")
        # Ticked unless the person unticked it (then kept so after a restart): a bundle runs as it is.
        self.include_model.setChecked(bool(self.context.settings.value(INCLUDE_MODEL_KEY, True, type=bool)))
        self.remote_base = named(QLineEdit(), "export_remote_base")
        self.remote_base.setPlaceholderText("hub id or path on the remote machine")
        self.out_edit = named(QLineEdit(), "export_out_dir")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._choose_folder)
        out_row = QHBoxLayout()
        out_row.addWidget(self.out_edit, 1)
        out_row.addWidget(browse)
        self.zip_check = named(QCheckBox("Also write a .zip"), "export_zip")
        self.export_button = named(QPushButton("Export bundle"), "export_button")
        self.export_button.clicked.connect(self.start_export)
        # A dataset of thousands of images takes minutes to copy and zip: it can be stopped, leaving nothing.
        self.cancel_button = named(QPushButton("Cancel export"), "export_cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel_export)
        self.progress = named(QProgressBar(), "export_progress")
        self.progress.setVisible(False)

        form = QFormLayout()
        form.addRow("GPU type", self.gpu_combo)
        form.addRow("GPUs per node", self.gpus_spin)
        form.addRow("Nodes", self.nodes_spin)
        form.addRow("Dataset", self.dataset_combo)
        form.addRow("Remote dataset", self.remote_dataset)
        form.addRow("Base model", self.base_label)
        form.addRow("", self.include_model)
        form.addRow("Remote base model", self.remote_base)
        form.addRow("Bundle folder", out_row)
        form.addRow("", self.zip_check)
        form.addRow(self.export_button)
        form.addRow(self.cancel_button)
        form.addRow(self.progress)
        options = QGroupBox("Bundle")
        options.setLayout(form)

        self.table = CostTable()
        self.table.sig_row_chosen.connect(self._choose_row)
        self.assumptions = named(QLabel(), "export_assumptions")
        self.assumptions.setWordWrap(True)
        self.assumptions.setVisible(False)
        show_assumptions = named(QPushButton("How these are worked out"), "export_show_assumptions")
        show_assumptions.setCheckable(True)
        show_assumptions.toggled.connect(self.assumptions.setVisible)
        edit = named(QPushButton("Edit prices and speeds…"), "export_edit_catalogue")
        edit.clicked.connect(self._edit_catalogue)
        cost_buttons = QHBoxLayout()
        cost_buttons.addWidget(show_assumptions)
        cost_buttons.addWidget(edit)
        cost_buttons.addStretch(1)
        costs = QGroupBox("Time and cost (double-click a row to choose it)")
        costs_layout = QVBoxLayout(costs)
        costs_layout.addWidget(self.table, 1)
        costs_layout.addWidget(self.assumptions)
        costs_layout.addLayout(cost_buttons)

        self.result = named(QPlainTextEdit(), "export_result")
        self.result.setReadOnly(True)
        self.result.setPlaceholderText("The bundle's folder and the command to run remotely appear here.")
        self.open_button = named(QPushButton("Open bundle folder"), "export_open")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(self._open_folder)

        # The bundle's options beside what the export wrote and the remote machine; the cost table below
        # them at the page's full width, so its Time and Cost columns show whole on a small screen too.
        self.remote = RemotePanel(self.context, self.gpus_spin.value, self.gpu_combo.currentData)
        self.cloud = CloudPanel(self.context, lambda: cloud_options(self.export_options()))
        costs_layout.insertWidget(1, self.cloud.offer_label)  # SkyPilot's answer right under the catalogue's
        outcome = QVBoxLayout()
        outcome.addWidget(self.result, 1)
        outcome.addWidget(self.open_button)
        outcome.addWidget(self.remote)
        outcome.addWidget(self.cloud)
        top = QHBoxLayout()
        top.addWidget(options, 1)
        top.addLayout(outcome, 1)
        intro = QLabel("Write a folder that trains this project on a rented multi-GPU machine with one "
                       "command, checking the machine first. Bring its runs/ back to the Runs page.")
        intro.setWordWrap(True)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.addWidget(QLabel(f"<h2>{self.title}</h2>"))
        layout.addWidget(intro)
        layout.addLayout(top)
        layout.addWidget(costs, 1)
        scroll = QScrollArea()  # a window shorter than the page scrolls it rather than overlapping its parts
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

        for signal in (self.gpu_combo.currentIndexChanged, self.gpus_spin.valueChanged, self.nodes_spin.valueChanged):
            signal.connect(self._options_changed)
        self.dataset_combo.currentIndexChanged.connect(self._update_enabled)
        self.include_model.toggled.connect(self._update_enabled)
        self.include_model.toggled.connect(lambda on: self.context.settings.setValue(INCLUDE_MODEL_KEY, on))

    # ------------------------------------------------------------ state

    def _load_catalogue(self) -> None:
        try:
            self.catalogue = load_catalogue()
        except CatalogueError as exc:
            self.catalogue = None
            self.assumptions.setText(f"The GPU catalogue cannot be read: {exc}")
            return
        current = self.gpu_combo.currentData()
        self.gpu_combo.blockSignals(True)
        self.gpu_combo.clear()
        for gpu in self.catalogue.gpus:
            self.gpu_combo.addItem(gpu.name, gpu.id)
        index = self.gpu_combo.findData(current)
        self.gpu_combo.setCurrentIndex(max(index, 0))
        self.gpu_combo.blockSignals(False)

    @property
    def project(self) -> Project | None:
        return self.context.project

    def _project_changed(self, _project: object) -> None:
        # A bundle folder chosen for the project before is not this one's: its own default again.
        self.out_edit.setModified(False)
        self.refresh()

    def refresh(self) -> None:
        """Recompute the table and the model hint from the current project and config."""
        config = self.context.config
        # A setting changed on another page during an export: a second press would queue a second export behind it.
        self.export_button.setEnabled(config is not None and self.project is not None and not self.worker.busy)
        self._update_base(config)
        self._update_enabled()
        self._default_out_dir()
        self.update_table()
        self.remote.update_enabled()
        self.cloud.update_enabled()

    def _update_base(self, config: TrainConfig | None) -> None:
        self._base_is_local = False
        if config is None or self.project is None:
            self.base_label.setText("Open a project first.")
            return
        base = config.model.base
        path = self.project.resolve(base)
        self._base_is_local = path.exists() or not is_hub_id(base)
        if self._base_is_local:
            self.base_label.setText(
                f"<b>{base}</b> is a local {'folder' if path.is_dir() else 'file'}: copy it into the bundle, "
                "or name where it is on the remote machine.")
        else:
            self.base_label.setText(f"<b>{base}</b> (hub id; downloaded on the remote machine)")

    def _update_enabled(self) -> None:
        self.remote_dataset.setEnabled(self.dataset_combo.currentIndex() == 1)
        local = self._base_is_local
        self.include_model.setEnabled(local)
        self.remote_base.setEnabled(not self.include_model.isChecked() or not local)

    def _default_out_dir(self) -> None:
        if self.project is None or self.out_edit.isModified():
            return
        name = self.context.config.output.name if self.context.config else "run"
        gpu = self.gpu_combo.currentData() or "gpu"
        shape = f"{self.nodes_spin.value()}x{self.gpus_spin.value()}" if self.nodes_spin.value() > 1 else f"{self.gpus_spin.value()}x"
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M")
        base = self.project.root / EXPORTS_DIR / f"{name}-{shape}{gpu}-{stamp}"
        # A second export in the same minute (the first one without its zip) gets a folder of its own: it was
        # refused as "exists and is not empty".
        folder, number = base, 2
        while folder.exists():
            folder, number = base.with_name(f"{base.name}-{number}"), number + 1
        self.out_edit.setText(str(folder))

    def _options_changed(self) -> None:
        self._default_out_dir()
        self.update_table()

    def update_table(self) -> list[CostRow]:
        config, catalogue = self.context.config, self.catalogue
        if config is None or catalogue is None or self.project is None:
            self.table.set_rows([])
            return []
        try:
            resolved = self.context.resolved_config(config)
        except ConfigError as exc:  # a path of the settings cannot be made absolute: say which
            self.table.set_rows([])
            self.assumptions.setText(f"No times or costs: {exc.describe()}")
            return []
        work = workload_from_config(config, self.project.root)
        try:
            rows = cost_table(work, catalogue, vram_estimator(resolved), COUNTS, self.nodes_spin.value())
            notes = assumptions(catalogue, work)
        except CatalogueError as exc:  # a person's older copy of the catalogue lacks this family
            self.table.set_rows([])
            self.assumptions.setText(f"No times or costs: {exc}")
            return []
        self.table.set_rows(rows, catalogue.currency)
        self.assumptions.setText("Assumptions: " + " ".join(notes))
        chosen = (self.gpu_combo.currentData(), self.gpus_spin.value())
        for number, row in enumerate(rows):
            if (row.gpu.id, row.per_node) == chosen:
                self.table.selectRow(number)
        return rows

    def _choose_row(self, gpu_id: str, count: int) -> None:
        self.gpu_combo.setCurrentIndex(self.gpu_combo.findData(gpu_id))
        self.gpus_spin.setValue(count)

    # ------------------------------------------------------------ export

    def export_options(self) -> dict[str, Any]:
        manifest_only = self.dataset_combo.currentIndex() == 1
        remote_dataset = self.remote_dataset.text().strip() if manifest_only else ""
        remote_base = self.remote_base.text().strip() if self.remote_base.isEnabled() else ""
        return {
            "gpus": self.gpus_spin.value(),
            "nodes": self.nodes_spin.value(),
            "gpu_type": self.gpu_combo.currentData(),
            "include_dataset": not manifest_only,
            "remote_dataset": remote_dataset or None,
            "include_model": self.include_model.isEnabled() and self.include_model.isChecked(),
            "remote_base": remote_base or None,
            "zip": self.zip_check.isChecked(),
        }

    def start_export(self) -> None:
        if self.project is None or self.context.config is None:
            return
        out = self.context.project_path(self.out_edit.text().strip())  # typed relative: inside the project
        self.export_button.setEnabled(False)
        self.open_button.setEnabled(False)
        self.progress.setVisible(True)
        self.progress.setRange(0, 0)
        self._cancel_requested = False
        self.cancel_button.setEnabled(True)
        self.cancel_button.setVisible(True)
        self.result.setPlainText(f"Writing the bundle to {out}…")
        self.worker.run(export_bundle, self.project.config_path, out, **self.export_options(),
                        cancel=lambda: self._cancel_requested, on_done=self._on_done, on_failed=lambda error: self._on_failed(error, out),
                        on_progress=self._on_progress, expected=(ConfigError, ExportError, CatalogueError, OSError))

    def _on_progress(self, message: str, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.setFormat(f"{message}  %v/%m")

    def cancel_export(self) -> None:
        """Stop the export at its next file; what it wrote is removed."""
        if self.worker.busy:
            self._cancel_requested = True
            self.cancel_button.setEnabled(False)
            self.result.setPlainText("Cancelling the export…")

    def _on_done(self, report: BundleReport) -> None:
        self.report = report
        self.cancel_button.setVisible(False)
        self.progress.setVisible(False)
        self.export_button.setEnabled(True)
        self.open_button.setEnabled(True)
        self.result.setPlainText(report.summary() + "\n\nSee README.md in the bundle for copying it and bringing runs/ back.")
        self.context.status(f"Bundle written to {report.zip_path or report.out_dir}")
        self.out_edit.setModified(False)
        self._default_out_dir()

    def _on_failed(self, error: BaseException, out: Path) -> None:
        self.cancel_button.setVisible(False)
        if isinstance(error, ExportCancelled):
            message = f"the export was cancelled; nothing of it is left in {out}"
        elif isinstance(error, ConfigError):
            message = error.describe()
        elif isinstance(error, LocalModelError):
            message = error.says(f"“{self.include_model.text()}” ticked",
                                 "the “Remote base model” field: a hub id or a path there")
        elif isinstance(error, OSError):
            message = f"could not write the bundle to {out}: {error}"
        else:
            message = str(error)
        self.progress.setVisible(False)
        self.export_button.setEnabled(True)
        self.result.setPlainText(f"The bundle was not written:\n{message}")

    def _choose_folder(self) -> None:
        # Opens where the bundle would go: the nearest folder there is of its parent (exports/ is made by the export).
        start = self.context.project_path(self.out_edit.text().strip()).parent
        while not start.is_dir() and start != start.parent:
            start = start.parent
        folder = QFileDialog.getExistingDirectory(self, "Parent folder of the bundle", str(start))
        if folder:
            self.out_edit.setText(str(Path(folder) / Path(self.out_edit.text()).name))
            self.out_edit.setModified(True)

    def _open_folder(self) -> None:
        if self.report is not None:
            open_with_desktop(self, self.report.out_dir, "the bundle's folder")

    def _edit_catalogue(self) -> None:
        path = ensure_user_catalogue()
        if open_with_desktop(self, path, "the prices and speeds file"):
            self.context.status(f"Edit {path}; the table reads it again when you come back to this page")

    def showEvent(self, event: Any) -> None:
        # The person may have edited the catalogue file meanwhile.
        self._load_catalogue()
        self.update_table()
        self.remote.refresh_machines()
        super().showEvent(event)

    # ------------------------------------------------------------ page interface

    def self_test(self, options: SelfTestOptions) -> dict[str, Any]:
        rows = self.update_table()
        if self.context.config is not None and not rows:
            raise RuntimeError("the Export page shows no cost rows for the open project")
        return {"export_rows": len(rows)}

    def can_close(self) -> bool:
        return not self.worker.busy or self.confirm_close()

    def shutdown(self) -> None:
        # An export still copying stops at its next file and removes its half bundle: the window closed, and the
        # studio went on copying unseen for minutes (a half bundle left behind if it was ended meanwhile).
        self._cancel_requested = True
        self.worker.wait(30.0)
        self.remote.shutdown()
        self.cloud.shutdown()
