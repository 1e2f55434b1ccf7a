"""The model library as a panel: the base models on this machine and those the studio can download.

The scan (headers only, remembered between scans) runs on the panel's Worker so the window
never waits for a slow disk; a scan that fails says why and offers to try again. A download
runs in its own process (`DownloadDialog`).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.core.families import model_title
from studio.core.models import library as model_library
from studio.core.models.hub_cache import cached_snapshot, missing_components
from studio.core.models.known import KnownModel, known_models
from studio.core.models.library import LibraryModel
from studio.core.text import size_text
from studio.gui.runner.worker import Worker
from studio.gui.widgets.downloads import DownloadDialog


class ModelLibraryPanel(QWidget):
    """Lists models; "Use" hands one to the config, "Download" fetches a known one first."""

    sig_chosen = Signal(str, str)  # model.base, family
    sig_scanned = Signal(int)  # models found

    def __init__(self, family: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("model_library")
        self.family = family
        self.models: list[LibraryModel] = []
        self.scanning = False
        self.dialog: DownloadDialog | None = None
        self.scan_error: str | None = None
        self.worker = Worker(self)
        self.status = QLabel("Looking for models…")
        self.status.setObjectName("model_library_status")
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, 4)
        self.table.setObjectName("model_library_table")
        self.table.setHorizontalHeaderLabels(["Model", "Family", "Size", "Where"])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        for column in (0, 1, 2):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.setWordWrap(False)  # long places are elided in the middle; the tooltip has all of them
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.verticalHeader().setVisible(False)
        self.table.doubleClicked.connect(lambda _index: self.use_selected())
        use = QPushButton("Use this model")
        use.setObjectName("model_library_use")
        use.clicked.connect(self.use_selected)
        add = QPushButton("Add a folder…")
        add.clicked.connect(self.add_folder)
        rescan = QPushButton("Look again")
        rescan.setObjectName("model_library_rescan")
        rescan.clicked.connect(self.refresh)
        self.rescan_button = rescan
        buttons = QHBoxLayout()
        for button in (use, add, rescan):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)

    # ------------------------------------------------------------ scanning

    def refresh(self) -> None:
        if self.scanning:
            return
        self.scanning = True
        self.scan_error = None
        self.status.setText("Looking for models…")
        self.rescan_button.setText("Look again")
        # Any error ends the scan here: shown with a Retry, never "Looking for models…" for good.
        self.worker.run(model_library.scan_library, on_done=self._scanned, on_failed=self._scan_failed,
                        expected=(Exception,))

    def _scan_failed(self, error: BaseException) -> None:
        self.scanning = False
        self.scan_error = f"{type(error).__name__}: {error}" if not isinstance(error, OSError) else str(error)
        self.status.setText(f"Could not look for models: {self.scan_error}. Press Retry to look again.")
        self.rescan_button.setText("Retry")
        self._fill(status=False)

    def _scanned(self, models: list[LibraryModel]) -> None:
        self.scanning = False
        self.models = models
        self._fill()
        self.sig_scanned.emit(len(models))

    def set_family(self, family: str | None) -> None:
        self.family = family
        self._fill(status=self.scan_error is None)

    def rows(self) -> list[tuple[str, LibraryModel | KnownModel]]:
        """("local" | "download", model) in the order shown: this machine's trainable models, then downloads,
        each with the models of the current family first."""
        local = sorted((m for m in self.models if m.trainable), key=lambda m: m.family != self.family)
        have = {m.hub_id for m in local if m.hub_id}
        known = sorted((k for k in known_models() if k.id not in have), key=lambda k: k.family != self.family)
        return [("local", m) for m in local] + [("download", k) for k in known]

    def _fill(self, status: bool = True) -> None:
        rows = self.rows()
        self.table.setRowCount(len(rows))
        for row, (_kind, model) in enumerate(rows):
            if isinstance(model, LibraryModel):
                cells = [model.hub_id or model.path.name, model_title(model.family, model.base),
                         size_text(model.size_bytes), model.place]
                tip = f"{model.label}\n{model.base}"
            else:
                cells = [model.title + (" (gated)" if model.gated else ""), model_title(model.family, model.id),
                         f"{model.size_gb:g} GB", "Hugging Face (download)"]
                tip = f"{model.id}\nlicence: {model.license}"
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(tip)
                item.setData(Qt.ItemDataRole.UserRole, row)
                self.table.setItem(row, column, item)
        if not status:
            return
        found = sum(1 for kind, _ in rows if kind == "local")
        places = len(model_library.model_places())
        self.status.setText(f"{found} model{'s' if found != 1 else ''} on this machine (searched {places} "
                            "places); the others can be downloaded.")

    # ------------------------------------------------------------ actions

    def use_selected(self) -> None:
        row = self.table.currentRow()
        rows = self.rows()
        if not 0 <= row < len(rows):
            self.status.setText("Choose a model in the list first.")
            return
        _kind, model = rows[row]
        if isinstance(model, LibraryModel):
            self.sig_chosen.emit(model.base, model.family or "")
            return
        snapshot = cached_snapshot(model.id)
        if snapshot is not None and not missing_components(snapshot):
            self.sig_chosen.emit(model.id, model.family)
            return
        self.download(model)

    def download(self, model: KnownModel) -> DownloadDialog:
        dialog = DownloadDialog(model.id, parent=self)
        dialog.sig_done.connect(lambda repo_id, _path: self._downloaded(repo_id, model.family))
        self.dialog = dialog
        dialog.show()
        dialog.start()
        return dialog

    def _downloaded(self, repo_id: str, family: str) -> None:
        self.sig_chosen.emit(repo_id, family)
        self.refresh()

    def add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A folder of checkpoints or diffusers models")
        if folder:
            model_library.save_added_folders([*model_library.saved_folders(), Path(folder)])
            self.refresh()

    def wait(self, timeout_ms: int = 30000) -> None:
        """Let a running scan finish and its result arrive (tests, the self-test and closing)."""
        self.worker.wait(timeout_ms / 1000)
