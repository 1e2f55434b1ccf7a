"""The bar above the Dataset page's grid: filters, bulk edit, captioning with a model, reload, undo and redo."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QUndoStack
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLineEdit, QPushButton, QWidget

from studio.gui.dataset.captions.text import redo_keys, undo_keys
from studio.gui.dataset.grid.grid_model import GridFilter


class DatasetToolbar(QWidget):
    """Filter fields and buttons; `sig_filter_changed` fires on any filter edit."""

    sig_filter_changed = Signal()

    def __init__(self, undo_stack: QUndoStack, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.filter_text = QLineEdit()
        self.filter_text.setPlaceholderText("Filter by file name or caption")
        self.filter_text.setObjectName("dataset_filter")
        self.filter_tag = QLineEdit()
        self.filter_tag.setPlaceholderText("Tag")
        self.filter_tag.setObjectName("dataset_tag_filter")
        self.filter_tag.setMaximumWidth(160)
        self.no_caption = QCheckBox("No caption")
        self.with_problems = QCheckBox("Has problems")
        self.bulk_button = QPushButton("Bulk edit…")
        self.bulk_button.setObjectName("dataset_bulk")
        self.caption_button = QPushButton("Caption with…")
        self.caption_button.setObjectName("dataset_caption")
        self.caption_button.setToolTip("Caption the selected or all images with a local model; review before writing")
        self.reload_button = QPushButton("Reload")
        self.reload_button.setObjectName("dataset_reload")
        self.reload_button.setToolTip("Read the image folders again: images and captions added, removed, renamed "
                                      "or edited outside the studio show (unsaved captions are saved first)")
        undo_button, redo_button = QPushButton("Undo"), QPushButton("Redo")
        undo_button.clicked.connect(undo_stack.undo)
        redo_button.clicked.connect(undo_stack.redo)
        undo_stack.canUndoChanged.connect(undo_button.setEnabled)
        undo_stack.canRedoChanged.connect(redo_button.setEnabled)
        undo_button.setEnabled(False)
        redo_button.setEnabled(False)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.filter_text, self.filter_tag, self.no_caption, self.with_problems, self.bulk_button,
                       self.caption_button, self.reload_button, undo_button, redo_button):
            layout.addWidget(widget)
        for signal in (self.filter_text.textChanged, self.filter_tag.textChanged):
            signal.connect(self.sig_filter_changed)
        for box in (self.no_caption, self.with_problems):
            box.toggled.connect(self.sig_filter_changed)

    def grid_filter(self) -> GridFilter:
        return GridFilter(self.filter_text.text(), self.filter_tag.text(), self.no_caption.isChecked(),
                          self.with_problems.isChecked())


def add_undo_shortcuts(widget: QWidget, undo_stack: QUndoStack) -> None:
    """Ctrl+Z, and Ctrl+Y or Ctrl+Shift+Z (with the platform's own keys), anywhere inside `widget`."""
    for action, keys in ((undo_stack.createUndoAction(widget), undo_keys()),
                         (undo_stack.createRedoAction(widget), redo_keys())):
        action.setShortcuts(keys)
        action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        widget.addAction(action)
