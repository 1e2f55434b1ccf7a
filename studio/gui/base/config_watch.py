"""Noticing when a project's studio.toml is changed by something else (an editor, git, a sync tool)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer, Signal

SETTLE_MS = 250  # an editor's save is often several writes; read once they are done


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None


class ConfigFileWatcher(QObject):
    """Emits `sig_changed(text)` when the file's text differs from the text last known to the studio.

    The studio's own saves are told with `known(text)`, so they never come back as changes.
    The folder is watched too: a safe save replaces the file, and a watch on the old file ends.
    """

    sig_changed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path: Path | None = None
        self.known_text: str | None = None
        self._watcher = QFileSystemWatcher(self)
        self._watcher.fileChanged.connect(self._soon)
        self._watcher.directoryChanged.connect(self._soon)
        self._timer = QTimer(self, singleShot=True, interval=SETTLE_MS)
        self._timer.timeout.connect(self.check)

    def watch(self, path: Path | None) -> None:
        self._timer.stop()
        for old in self._watcher.files() + self._watcher.directories():
            self._watcher.removePath(old)
        self.path = path
        self.known_text = read_text(path) if path is not None else None
        if path is not None:
            self._watcher.addPath(str(path.parent))
            if path.exists():
                self._watcher.addPath(str(path))

    def known(self, text: str | None = None) -> None:
        """The file now holds what the studio wrote (or read); read it when `text` is not given."""
        if self.path is not None:
            self.known_text = text if text is not None else read_text(self.path)

    def _soon(self, _changed: str) -> None:
        self._timer.start()

    def check(self) -> bool:
        """Compare the file with the known text now; True (and sig_changed) when someone else changed it."""
        if self.path is None:
            return False
        if self.path.exists() and str(self.path) not in self._watcher.files():
            self._watcher.addPath(str(self.path))
        text = read_text(self.path)
        if text is None or text == self.known_text:
            return False
        self.known_text = text  # asked once per version of the file
        self.sig_changed.emit(text)
        return True
