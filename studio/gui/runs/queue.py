"""The queue panel: configs that train one after the other."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.core.runs.queue import QueueError, QueueItem
from studio.gui.runner.run_controller import RunController


class QueuePanel(QWidget):
    def __init__(self, controller: RunController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("queue_panel")
        self.controller = controller
        self.list = QListWidget()
        self.list.setObjectName("queue_list")
        self.add_button = QPushButton("Add config…")
        self.up_button = QPushButton("Up")
        self.down_button = QPushButton("Down")
        self.remove_button = QPushButton("Remove")
        self.start_button = QPushButton("Start queue")
        self.start_button.setObjectName("queue_start")
        self.stop_after = QCheckBox("Stop the queue after the current run")
        self.stop_after.setObjectName("queue_stop_after")
        buttons = QHBoxLayout()
        for b in (self.add_button, self.up_button, self.down_button, self.remove_button, self.start_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.stop_after)
        self.add_button.clicked.connect(self._pick_config)
        self.up_button.clicked.connect(lambda: self.move_selected(-1))
        self.down_button.clicked.connect(lambda: self.move_selected(1))
        self.remove_button.clicked.connect(self.remove_selected)
        self.start_button.clicked.connect(controller.start_queue)
        self.stop_after.toggled.connect(self._set_stop_after)
        controller.sig_queue_changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        queue = self.controller.queue
        current = self.selected_id()
        self.list.clear()
        self.setEnabled(queue is not None)
        if queue is None:
            return
        for item in queue.items:
            row = QListWidgetItem(self._describe(item))
            row.setData(Qt.ItemDataRole.UserRole, item.id)
            row.setToolTip(f"{item.config}\n{item.message}".strip())
            self.list.addItem(row)
            if item.id == current:
                self.list.setCurrentItem(row)
        self.stop_after.blockSignals(True)
        self.stop_after.setChecked(queue.stop_after_current)
        self.stop_after.blockSignals(False)

    @staticmethod
    def _describe(item: QueueItem) -> str:
        text = f"{item.label} — {item.state}"
        if item.run_dir:
            text += f" ({Path(item.run_dir).name})"
        return text

    def selected_id(self) -> str | None:
        row = self.list.currentItem()
        value = row.data(Qt.ItemDataRole.UserRole) if row is not None else None
        return value if isinstance(value, str) else None

    def add_config(self, path: Path) -> None:
        if self.controller.queue is None:
            return
        try:
            self.controller.queue.add(path)
        except QueueError as exc:
            self.controller.sig_message.emit(str(exc))
        self.refresh()

    def _pick_config(self) -> QFileDialog:
        """A file dialog in the project's folder (where its studio.toml and the queue are)."""
        queue = self.controller.queue
        start = str(queue.path.parent) if queue is not None else ""
        dialog = QFileDialog(self, "Add a config to the queue", start, "Config (*.toml)")
        dialog.setObjectName("queue_add_dialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(lambda path: self.add_config(Path(path)) if path else None)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()
        return dialog

    def move_selected(self, delta: int) -> None:
        queue, item_id = self.controller.queue, self.selected_id()
        if queue is None or item_id is None:
            return
        index = next(i for i, it in enumerate(queue.items) if it.id == item_id)
        queue.move(item_id, index + delta)
        self.refresh()

    def remove_selected(self) -> None:
        queue, item_id = self.controller.queue, self.selected_id()
        if queue is None or item_id is None:
            return
        try:
            queue.remove(item_id)
        except QueueError as exc:
            self.controller.sig_message.emit(str(exc))
        self.refresh()

    def _set_stop_after(self, value: bool) -> None:
        if self.controller.queue is not None:
            self.controller.queue.set_stop_after_current(value)
