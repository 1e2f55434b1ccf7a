"""Opening a file or folder with the desktop's own program, and saying so when there is none."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QMessageBox, QWidget


def open_with_desktop(parent: QWidget, path: Path, what: str) -> bool:
    """Open `path` as a double-click would. A desktop without a program for it (a minimal Linux, a
    remote session) gets a message naming the path, which is also put on the clipboard."""
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
        return True
    QGuiApplication.clipboard().setText(str(path))
    QMessageBox.information(
        parent, f"Open {what}",
        f"No program on this desktop opens {what}. Open it yourself:\n\n{path}\n\n"
        "(The path is on the clipboard.)")
    return False
