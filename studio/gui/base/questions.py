"""A question before something is lost: one button that goes ahead, and Cancel (Escape and the window's cross
are Cancel too)."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm(parent: QWidget, title: str, text: str, action: str,
            icon: QMessageBox.Icon = QMessageBox.Icon.Warning) -> bool:
    """True when the person presses `action`; False on Cancel."""
    box = QMessageBox(icon, title, text, parent=parent)
    go = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    return box.clickedButton() is go
