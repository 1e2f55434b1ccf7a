"""File → Open Recent: the projects opened last, kept in the studio's settings, newest first."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMenu, QWidget

MAX_RECENT = 8
KEY = "recent_projects"


class RecentProjects:
    """The list and its menu; choosing an entry calls `open_path` with it."""

    def __init__(self, settings: QSettings, parent: QWidget, open_path: Callable[[str], object]) -> None:
        self.settings, self.open_path = settings, open_path
        self.menu = QMenu("Open &Recent", parent)
        self.menu.setObjectName("recent_menu")
        self.refresh()

    def paths(self) -> list[str]:
        value = self.settings.value(KEY, [])
        items = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else []
        return [p for p in items if isinstance(p, str) and p]

    def remember(self, path: str) -> None:
        self._store([path, *(p for p in self.paths() if p != path)][:MAX_RECENT])

    def forget(self, path: str) -> None:
        self._store([p for p in self.paths() if p != path])

    def _store(self, paths: list[str]) -> None:
        self.settings.setValue(KEY, paths)
        self.refresh()

    def refresh(self) -> None:
        self.menu.clear()
        recent = self.paths()
        for path in recent:
            action = self.menu.addAction(path.replace("&", "&&"))  # "Cats & Dogs": a menu reads one "&" as a mark
            action.triggered.connect(lambda _checked=False, p=path: self.open_path(p))
        if not recent:
            self.menu.addAction("No recent projects").setEnabled(False)
