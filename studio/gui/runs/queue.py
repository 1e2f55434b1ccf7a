"""The queue panel: configs that train one after the other."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import load_resolved
from studio.core.runs.scheduling.queue import QueueError, QueueItem
from studio.core.runs.scheduling.sweep import SweepError, parse_values, write_sweep
from studio.gui.runner.run_controller import RunController

# Settings a sweep varies most often; any other is typed as in the TOML file.
WATCH_MS = 1000  # how often the panel looks whether another window changed the queue file
SWEEP_FIELDS = ("training.learning_rate", "method.rank", "method.alpha", "training.max_steps", "training.batch_size",
                "training.seed", "dataset.resolution")


class VaryDialog(QDialog):
    """Which setting, and its values: a list (1e-4, 5e-5, 1e-5) or a range (1e-4..1e-5 x3, or log3)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Vary a queued config")
        self.field = QComboBox()
        self.field.setEditable(True)
        self.field.addItems(SWEEP_FIELDS)
        self.values = QLineEdit()
        self.values.setPlaceholderText("1e-4, 5e-5, 1e-5   or   1e-4..1e-5 x3   or   1e-4..1e-6 log3")
        # The examples are the help: wide enough to read them whole (and the title with them).
        self.values.setMinimumWidth(self.values.fontMetrics().horizontalAdvance(self.values.placeholderText()) + 24)
        form = QFormLayout(self)
        form.addRow("Setting", self.field)
        form.addRow("Values", self.values)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)


class QueuePanel(QWidget):
    sig_compare = Signal(list)  # run folder names of a sweep, to select together on the Runs page

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
        self.vary_button = QPushButton("Vary…")
        self.vary_button.setObjectName("queue_vary")
        self.vary_button.setToolTip("Queue N runs of the selected config that differ in one setting")
        self.compare_button = QPushButton("Compare sweep")
        self.compare_button.setObjectName("queue_compare_sweep")
        self.compare_button.setToolTip("Select the runs of the selected item's sweep together on the Runs table")
        self.start_button = QPushButton("Start queue")
        self.start_button.setObjectName("queue_start")
        self.stop_after = QCheckBox("Stop the queue after the current run")
        self.stop_after.setObjectName("queue_stop_after")
        self.continue_on_error = QCheckBox("Continue on error (go on past a failed run)")
        self.continue_on_error.setObjectName("queue_continue_on_error")
        buttons = QHBoxLayout()
        for b in (self.add_button, self.vary_button, self.up_button, self.down_button, self.remove_button,
                  self.start_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.stop_after)
        layout.addWidget(self.continue_on_error)
        layout.addWidget(self.compare_button)
        self.add_button.clicked.connect(self._pick_config)
        self.up_button.clicked.connect(lambda: self.move_selected(-1))
        self.down_button.clicked.connect(lambda: self.move_selected(1))
        self.remove_button.clicked.connect(self.remove_selected)
        self.start_button.clicked.connect(controller.start_queue)
        self.stop_after.toggled.connect(self._set_stop_after)
        self.continue_on_error.toggled.connect(self._set_continue_on_error)
        self.vary_button.clicked.connect(self._vary_dialog)
        self.compare_button.clicked.connect(self.compare_sweep)
        controller.sig_queue_changed.connect(self.refresh)
        # Another studio window on the project changes the queue file: this list follows it.
        self._watch = QTimer(self)
        self._watch.setInterval(WATCH_MS)
        self._watch.timeout.connect(self._follow_file)
        self._watch.start()
        self.refresh()

    def _follow_file(self) -> None:
        queue = self.controller.queue
        if queue is not None and queue.changed_on_disk():
            try:
                queue.refresh()
            except OSError as exc:  # the project's lock kept too long: the next tick tries again
                self.controller.sig_message.emit(f"The queue could not be read again: {exc}")
                return
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
        self.continue_on_error.blockSignals(True)
        self.continue_on_error.setChecked(queue.continue_on_error)
        self.continue_on_error.blockSignals(False)

    @staticmethod
    def _describe(item: QueueItem) -> str:
        text = f"{item.label} — {'FAILED' if item.state == 'failed' else item.state}"
        if item.sweep:
            text += f" [sweep {item.sweep}]"
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
            # Not a config the trainer reads (another .toml, a mistyped value): said now, not at its turn in the night.
            if path.is_file():
                load_resolved(path)
        except (ConfigError, OSError) as exc:
            what = exc.describe() if isinstance(exc, ConfigError) else str(exc)
            self.controller.sig_message.emit(f"{path.name} was not queued: {what}")
            return
        try:
            item = self.controller.queue.add(path)
        except QueueError as exc:
            self.controller.sig_message.emit(str(exc))
        else:
            if any(i.config == item.config and i.state == "pending" and i.id != item.id
                   for i in self.controller.queue.items):
                # A queued item is the file, read when its run starts: a studio.toml queued, changed and queued
                # again trains the last change twice.
                self.controller.sig_message.emit(
                    f"{item.label} is queued twice: each item trains the file as it is when its run starts, so both "
                    "train the same settings. To queue another version, copy the file under another name and queue "
                    "that, or use Vary… to queue one setting's values.")
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
        try:
            queue.move(item_id, index + delta)
        except QueueError as exc:  # another window removed it meanwhile
            self.controller.sig_message.emit(str(exc))
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

    def vary_selected(self, field: str, values_text: str) -> list[QueueItem]:
        """The selected config as N queued configs that differ in `field`; [] (and a message) if refused."""
        queue, item_id = self.controller.queue, self.selected_id()
        if queue is None or item_id is None:
            self.controller.sig_message.emit("Select a queued config to vary first.")
            return []
        item = queue.get(item_id)
        try:
            paths = write_sweep(Path(item.config), field.strip(), parse_values(values_text))
        except (SweepError, ConfigError, OSError) as exc:
            self.controller.sig_message.emit(f"No sweep was queued: {exc}")
            return []
        try:
            added = queue.add_sweep(item_id, paths, paths[0].parent.name)
        except QueueError as exc:  # another window removed the item meanwhile
            self.controller.sig_message.emit(f"No sweep was queued: {exc}")
            added = []
        self.refresh()
        return added

    def sweep_runs(self) -> list[str]:
        """The run folders of the selected item's sweep that have started."""
        queue, item_id = self.controller.queue, self.selected_id()
        if queue is None or item_id is None or not queue.get(item_id).sweep:
            return []
        sweep = queue.get(item_id).sweep
        return [Path(i.run_dir).name for i in queue.items if i.sweep == sweep and i.run_dir]

    def compare_sweep(self) -> None:
        names = self.sweep_runs()
        if not names:
            self.controller.sig_message.emit("Select an item of a sweep that has runs to compare.")
            return
        self.sig_compare.emit(names)

    def _vary_dialog(self) -> None:
        dialog = VaryDialog(self)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.vary_selected(dialog.field.currentText(), dialog.values.text())

    def _set_continue_on_error(self, value: bool) -> None:
        if self.controller.queue is not None:
            try:
                self.controller.queue.set_continue_on_error(value)
            except QueueError as exc:
                self.controller.sig_message.emit(str(exc))
            self.refresh()  # the save read the file first: what another window changed shows (the watch sees no change)

    def _set_stop_after(self, value: bool) -> None:
        if self.controller.queue is not None:
            try:
                self.controller.queue.set_stop_after_current(value)
            except QueueError as exc:
                self.controller.sig_message.emit(str(exc))
            self.refresh()
