"""The caption box: typing with the keyboard alone.

Tags complete from the dataset's own tags; Ctrl+Z, Ctrl+Y and Ctrl+Shift+Z go to the page's
undo stack (the box keeps no history of its own, so undo means the same everywhere); Tab
leaves the box instead of typing a tab.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QEvent, QStringListModel, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence, QTextCursor
from PySide6.QtWidgets import QAbstractItemView, QCompleter, QListView, QPlainTextEdit, QWidget

MAX_COMPLETIONS = 5000  # the most frequent tags; enough for any dataset a person types by hand
_POPUP_KEYS = (Qt.Key.Key_Enter, Qt.Key.Key_Return, Qt.Key.Key_Escape, Qt.Key.Key_Tab, Qt.Key.Key_Backtab)


def undo_keys() -> list[QKeySequence]:
    """The platform's undo keys (asked once a QApplication exists: the platform theme knows them)."""
    return QKeySequence.keyBindings(QKeySequence.StandardKey.Undo)


def redo_keys() -> list[QKeySequence]:
    """The platform's redo keys, and both Ctrl+Y and Ctrl+Shift+Z everywhere."""
    keys = QKeySequence.keyBindings(QKeySequence.StandardKey.Redo)
    return keys + [k for k in (QKeySequence("Ctrl+Y"), QKeySequence("Ctrl+Shift+Z")) if k not in keys]


def _matches(event: QKeyEvent, keys: Iterable[QKeySequence]) -> bool:
    pressed = QKeySequence(event.keyCombination())
    return any(pressed.matches(k) == QKeySequence.SequenceMatch.ExactMatch for k in keys)


def tag_prefix(text: str, position: int) -> tuple[int, str]:
    """Where the tag under the caret starts, and what of it is typed (leading spaces skipped)."""
    start = text.rfind(",", 0, position) + 1
    while start < position and text[start] == " ":
        start += 1
    return start, text[start:position]


class CaptionTextEdit(QPlainTextEdit):
    """Emits `sig_undo` / `sig_redo` for the undo keys; completes the tag being typed."""

    sig_undo = Signal()
    sig_redo = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setUndoRedoEnabled(False)
        self.setTabChangesFocus(True)
        self.tags = QStringListModel(self)
        self.completer = QCompleter(self.tags, self)
        self.completer.setWidget(self)
        self.completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        self.completer.setModelSorting(QCompleter.ModelSorting.UnsortedModel)  # most frequent first
        self.completer.setFilterMode(Qt.MatchFlag.MatchStartsWith)
        self.completer.activated.connect(self.insert_completion)
        self.popup: QAbstractItemView = self.completer.popup() or QListView()

    def set_tags(self, tags: list[str]) -> None:
        """The tags to offer, most frequent first."""
        self.tags.setStringList(tags[:MAX_COMPLETIONS])

    def move_caret_to_end(self) -> None:
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self.setTextCursor(cursor)

    def insert_completion(self, tag: str) -> None:
        cursor = self.textCursor()
        start, _typed = tag_prefix(self.toPlainText(), cursor.position())
        cursor.setPosition(start, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(tag)
        self.setTextCursor(cursor)

    def event(self, event: QEvent) -> bool:
        # Claim the undo keys before the window's shortcuts see them, so they reach keyPressEvent.
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent) and (
                _matches(event, undo_keys()) or _matches(event, redo_keys())):
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        popup = self.popup
        if popup.isVisible() and event.key() in _POPUP_KEYS:
            event.ignore()  # the completer's popup takes these (choose, or close)
            return
        if _matches(event, undo_keys()):
            self.sig_undo.emit()
            return
        if _matches(event, redo_keys()):
            self.sig_redo.emit()
            return
        super().keyPressEvent(event)
        if self.isReadOnly() or not event.text() or event.text() in ",\t\r\n":
            popup.hide()
            return
        self._complete()

    def _complete(self) -> None:
        cursor = self.textCursor()
        _start, typed = tag_prefix(self.toPlainText(), cursor.position())
        popup = self.popup
        if len(typed.strip()) < 1 or self.tags.rowCount() == 0:
            popup.hide()
            return
        self.completer.setCompletionPrefix(typed)
        if self.completer.completionCount() == 0 or (
                self.completer.completionCount() == 1 and self.completer.currentCompletion() == typed):
            popup.hide()
            return
        popup.setCurrentIndex(self.completer.completionModel().index(0, 0))
        rect = self.cursorRect()
        rect.setWidth(popup.sizeHintForColumn(0) + popup.verticalScrollBar().sizeHint().width())
        self.completer.complete(rect)
