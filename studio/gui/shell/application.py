"""The QApplication and the settings file: made once, the same way, by the app and its self-test."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from studio.core import user_dirs
from studio.core.resources import resource_path
from studio.gui.base.gui_thread_gc import install_gui_thread_gc
from studio.gui.base.layout_items import install as install_layout_item_guard
from studio.gui.base.wheel_guard import install_wheel_guard


def settings_path() -> Path:
    """The app's settings file; STUDIO_CONFIG_DIR moves it (tests never touch the real one)."""
    return user_dirs.config_dir() / "studio.ini"


def make_settings(path: Path | None = None) -> QSettings:
    target = path or settings_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    return QSettings(str(target), QSettings.Format.IniFormat)


DESKTOP_FILE_NAME = "sd-training-studio"


def make_application(argv: Sequence[str] | None = None) -> QApplication:
    existing = QApplication.instance()
    install_layout_item_guard()  # before any page builds a layout
    if isinstance(existing, QApplication):
        install_gui_thread_gc(existing)
        return existing
    app = QApplication(list(argv or sys.argv[:1]))
    app.setApplicationName(user_dirs.DISPLAY_NAME)
    app.setOrganizationName(user_dirs.APP_NAME)
    app.setApplicationDisplayName(user_dirs.DISPLAY_NAME)
    # Wayland finds the menu entry (its icon and name) by this: install.sh names it so.
    app.setDesktopFileName(DESKTOP_FILE_NAME)
    install_wheel_guard(app)
    install_gui_thread_gc(app)  # before any pool thread runs: cycles are freed on this thread only
    icon = resource_path("icons", "studio.svg")
    if icon.exists():
        app.setWindowIcon(QIcon(str(icon)))
    style = resource_path("style.qss")
    if style.exists():
        app.setStyleSheet(style.read_text(encoding="utf-8"))
    return app
