"""The console pane: the trainer's output as it comes, with a jump to a line."""

from __future__ import annotations

from PySide6.QtGui import QFont, QTextCursor, QTextDocument
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QVBoxLayout, QWidget

MAX_LINES = 20_000


class ConsolePane(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("console_pane")
        self.text = QPlainTextEdit()
        self.text.setObjectName("console_text")
        self.text.setReadOnly(True)
        self.text.setMaximumBlockCount(MAX_LINES)  # older lines stay in console.log
        self.text.setFont(QFont("monospace"))
        self.progress = QLabel()
        self.progress.setObjectName("console_progress")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.progress)

    def clear(self) -> None:
        self.text.clear()
        self.progress.clear()

    def append(self, text: str) -> None:
        self.text.appendPlainText(text)

    def set_progress(self, text: str) -> None:
        self.progress.setText(text.strip())

    def jump_to(self, needle: str) -> bool:
        """Select the last line holding `needle` (else the last traceback) and scroll to it."""
        doc = self.text.document()
        for target in (needle, "Traceback", "Error"):
            if not target:
                continue
            found = doc.find(target, doc.characterCount(), QTextDocument.FindFlag.FindBackward)
            if not found.isNull():
                found.movePosition(QTextCursor.MoveOperation.StartOfBlock)
                found.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                self.text.setTextCursor(found)
                self.text.centerCursor()
                return True
        return False

    def selected_line(self) -> str:
        return self.text.textCursor().selectedText()
