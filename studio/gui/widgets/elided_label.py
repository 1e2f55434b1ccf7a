"""A one-line label that keeps to its width: a long path is shortened in the middle ("/home/…/cat lora"),
whole in its tooltip, so what stands beside it (the status bar's messages) is not cut."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget


class ElidedLabel(QLabel):
    def __init__(self, width: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setMaximumWidth(width)

    def setText(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        margin = 2 * self.margin() + 8
        super().setText(self.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle,
                                                      self.maximumWidth() - margin))

    def full_text(self) -> str:
        return self._full
