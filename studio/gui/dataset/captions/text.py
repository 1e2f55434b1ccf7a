"""The caption box: typing with the keyboard alone.

Tags complete from the dataset's own tags, in a list of up to 8 rows wide enough for them;
Enter or Tab takes the highlighted one, Escape closes the list. Ctrl+Z, Ctrl+Y and Ctrl+Shift+Z
go to the page's undo stack (the box keeps no history of its own, so undo means the same
everywhere); with no list open, Tab leaves the box instead of typing a tab.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QEvent, QRect, QStringListModel, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence, QTextCursor
from PySide6.QtWidgets import QAbstractItemView, QApplication, QCompleter, QListView, QPlainTextEdit, QWidget

MAX_COMPLETIONS = 5000  # the most frequent tags; enough for any dataset a person types by hand
POPUP_ROWS = 8  # rows of the completion list (fewer when fewer tags match)
POPUP_MAX_WIDTH = 640
_TAKE_KEYS = (Qt.Key.Key_Enter, Qt.Key.Key_Return, Qt.Key.Key_Tab)
_POPUP_KEYS = (*_TAKE_KEYS, Qt.Key.Key_Escape, Qt.Key.Key_Backtab)
_MOVE_KEYS = (Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown)


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
        self.completer.setMaxVisibleItems(POPUP_ROWS)
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
        # Enter and Tab take the highlighted tag while the list is open (before Tab moves the focus on).
        if (event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent) and self.popup.isVisible()
                and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier):
            if event.key() in _TAKE_KEYS:
                self.take_highlighted()
                event.accept()
                return True
            if event.key() == Qt.Key.Key_Escape:
                self.popup.hide()
                event.accept()
                return True
            if event.key() in _MOVE_KEYS:  # where the list has no keyboard grab, it still gets these
                QApplication.sendEvent(self.popup, event)
                return True
        return super().event(event)

    def take_highlighted(self) -> None:
        """Put the highlighted tag of the open list (its first, when none is) in place of the typed part."""
        index = self.popup.currentIndex()
        if not index.isValid():
            index = self.completer.completionModel().index(0, 0)
        self.popup.hide()
        if index.isValid():
            self.insert_completion(str(index.data()))

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
        model = self.completer.completionModel()
        count = self.completer.completionCount()  # counts every match (the list fetches rows lazily)
        rect = self.cursorRect()
        self.completer.complete(rect)
        popup.setCurrentIndex(model.index(0, 0))
        self._size_popup(count, rect)

    def _size_popup(self, count: int, rect: QRect) -> None:
        """Up to POPUP_ROWS whole rows, as wide as the longest tag shown, below the caret (above it
        when the screen ends first)."""
        popup = self.popup
        model = self.completer.completionModel()
        rows = min(POPUP_ROWS, count)
        frame = 2 * popup.frameWidth()
        height = max(1, popup.sizeHintForRow(0)) * rows + frame
        metrics = popup.fontMetrics()
        texts = [str(model.index(row, 0).data()) for row in range(min(count, 200))]
        scroll = popup.verticalScrollBar().sizeHint().width() if count > rows else 0
        width = max((metrics.horizontalAdvance(text) for text in texts), default=0) + 24 + frame + scroll
        width = min(max(width, 120), POPUP_MAX_WIDTH)
        below = self.mapToGlobal(rect.bottomLeft())
        screen = self.screen().availableGeometry() if self.screen() is not None else None
        y = below.y()
        if screen is not None and y + height > screen.bottom():
            y = self.mapToGlobal(rect.topLeft()).y() - height
        popup.setGeometry(below.x(), y, width, height)
