"""The Export page (placeholder until its issue fills it)."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from studio.gui.context import StudioContext
from studio.gui.page import Page


class ExportPage(Page):
    title = "Export"
    page_id = "page_export"

    def __init__(self, context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"<h2>{self.title}</h2>"))
        layout.addStretch(1)
