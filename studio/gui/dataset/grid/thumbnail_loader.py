"""Thumbnails for the grid: made by a helper process, newest requests first, kept as pixmaps in memory."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage, QPixmap

from studio.core import user_dirs
from studio.core.dataset.thumbnails import MAX_DECODE_PIXELS, THUMB_SIZE, Thumbnail, thumbnail_worker
from studio.gui.dataset.scan.helper_process import HelperProcess

__all__ = ["MAX_DECODE_PIXELS", "THUMB_SIZE", "ThumbnailLoader", "thumbnail_cache_dir"]

MEMORY_THUMBS = 800  # pixmaps kept in memory (~40 MB); the disk cache holds the rest
BATCH = 8  # thumbnails per request: small enough that rows scrolled into view get theirs quickly
IN_FLIGHT = 2  # requests the helper holds at once, so it never waits on the window
# Requests kept waiting: about two screens. Rows scrolled past long ago are dropped (they ask
# again when shown), so a fast scroll through 10,000 images leaves no backlog of work behind.
MAX_QUEUED = 256


def thumbnail_cache_dir() -> Path:
    """The thumbnail cache folder: thumbnails/ in the studio's cache folder."""
    folder = user_dirs.cache_dir() / "thumbnails"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def to_pixmap(thumbnail: Thumbnail) -> QPixmap:
    width, height, data = thumbnail
    # The QImage only borrows `data`; copy() gives the pixmap pixels of its own.
    return QPixmap.fromImage(QImage(data, width, height, width * 3, QImage.Format.Format_RGB888).copy())


class ThumbnailLoader(QObject):
    """Hands out pixmaps it has and asks the helper process for the others, latest requests first.

    The helper starts on the first request. If it dies (a file that crashes the image
    decoder), the files it held are tried again one at a time; one that kills it alone
    is shown as unreadable, and the grid goes on.
    """

    sig_ready = Signal(str)  # path whose thumbnail arrived (or failed)

    def __init__(self, parent: QObject | None = None, folder: Path | None = None) -> None:
        super().__init__(parent)
        self.folder = folder or thumbnail_cache_dir()
        self._helper: HelperProcess | None = None
        self._pixmaps: OrderedDict[str, QPixmap] = OrderedDict()
        self._failed: set[str] = set()
        self._queued: dict[str, Path] = {}  # insertion order: the newest request is last
        self._in_flight: list[list[str]] = []
        self._suspects: set[str] = set()  # held by a helper that died; sent alone
        self._closed = False

    def pixmap(self, path: Path) -> QPixmap | None:
        """The thumbnail if ready; otherwise None and it is queued (moved to the front if already queued)."""
        key = str(path)
        found = self._pixmaps.get(key)
        if found is not None:
            self._pixmaps.move_to_end(key)
            return found
        if key in self._failed or any(key in batch for batch in self._in_flight):
            return None
        self._queued.pop(key, None)
        self._queued[key] = path
        while len(self._queued) > MAX_QUEUED:
            del self._queued[next(iter(self._queued))]
        self._pump()
        return None

    def failed(self, path: Path) -> bool:
        return str(path) in self._failed

    def forget(self, path: Path) -> None:
        self._pixmaps.pop(str(path), None)
        self._failed.discard(str(path))

    def forget_all(self) -> None:
        """Drop the thumbnails held and the failures noted; what is asked for next is made (or read) again."""
        self._pixmaps.clear()
        self._failed.clear()

    @property
    def busy(self) -> bool:
        return bool(self._queued or self._in_flight)

    def _pump(self) -> None:
        while not self._closed and self._queued and len(self._in_flight) < IN_FLIGHT:
            if self._helper is None:
                self._helper = HelperProcess(thumbnail_worker, (str(self.folder), THUMB_SIZE), self)
                self._helper.sig_message.connect(self._arrived)
                self._helper.sig_exited.connect(self._helper_died)
            batch: list[str] = []
            for key in reversed(self._queued):
                if key in self._suspects:
                    batch = batch or [key]
                    break
                batch.append(key)
                if len(batch) == BATCH:
                    break
            request = [(key, str(self._queued.pop(key))) for key in batch]
            self._in_flight.append(batch)
            if not self._helper.send(request):
                return  # _helper_died puts the batch back

    def _arrived(self, answer: Any) -> None:
        keys = {key for key, _ in answer}
        self._in_flight = [batch for batch in self._in_flight if not keys.issuperset(batch)]
        for key, thumbnail in answer:
            self._suspects.discard(key)
            if thumbnail is None:
                self._failed.add(key)
            else:
                self._pixmaps[key] = to_pixmap(thumbnail)
                while len(self._pixmaps) > MEMORY_THUMBS:
                    self._pixmaps.popitem(last=False)
            self.sig_ready.emit(key)
        self._pump()

    def _helper_died(self) -> None:
        held = [key for batch in self._in_flight for key in batch]
        self._in_flight = []
        if self._helper is not None:
            self._helper.stop(0)
            self._helper.deleteLater()
            self._helper = None
        for key in held:
            if key in self._suspects:  # it was alone with the helper when it died
                self._suspects.discard(key)
                self._failed.add(key)
                self.sig_ready.emit(key)
            else:
                self._suspects.add(key)
                self._queued[key] = Path(key)
        self._pump()

    def shutdown(self) -> None:
        self._closed = True
        self._queued.clear()
        if self._helper is not None:
            self._helper.stop()
            self._helper.join(5)
            self._helper = None
