"""The base of every page in the main window's navigation."""

from __future__ import annotations

from typing import Any, ClassVar

from PySide6.QtWidgets import QWidget

from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext


class Page(QWidget):
    """A page takes the shared context and subscribes to its signals.

    Subclasses set `title` (shown in the navigation) and `page_id` (the objectName,
    used by the self-test, screenshots and tests).
    """

    title: ClassVar[str] = "Page"
    page_id: ClassVar[str] = "page"

    def __init__(self, context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.setObjectName(self.page_id)

    def self_test(self, options: SelfTestOptions) -> dict[str, Any]:
        """Run this page's part of the self-test once it is shown; return facts for the JSON line.

        A page may spin a local event loop here (e.g. to wait for a demo run) but must
        return; it raises on a failure.
        """
        return {}

    def busy(self) -> bool:
        """Still filling in what it shows first (the Dataset page: listing and reading its images). The
        window builds its other pages after the shown one is done, so their building does not hold it up."""
        return False

    def can_close(self) -> bool:
        """Asked before the window closes (a running training asks the person)."""
        return True

    def shutdown(self) -> None:
        """Flush pending saves, stop timers, workers and processes."""
