"""Previews of the Dataset page's images, decoded on a thread of their own.

A 100 MB TIFF or a 7000 px PNG takes a second or more to decode; on the GUI thread the window would freeze
for it at every click. Here the window goes on, and a person stepping through images faster than they decode
gets only the last one read: the ones stepped past are never decoded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QSize, Qt
from PySide6.QtGui import QImage, QImageReader

from studio.core.dataset.thumbnails import MAX_DECODE_PIXELS
from studio.gui.dataset.editor.mask_overlay import tinted
from studio.gui.runner.worker import Worker

LOADING_TEXT = "Loading the preview…"
UNREADABLE_TEXT = "This image cannot be previewed (unreadable or too large)"

MaskFor = Callable[[Path], QImage | None]
Pictures = list[QImage | None]


def read_preview(path: Path, size: int) -> QImage | None:
    """A preview at most `size` pixels wide and high; None for an unreadable image or a huge non-JPEG one (past
    MAX_DECODE_PIXELS it would be decoded whole first: seconds and gigabytes). JPEG decodes at the smaller size
    itself. Safe off the GUI thread."""
    reader = QImageReader(str(path))
    reader.setAutoTransform(True)
    full = reader.size()
    if not full.isValid():
        return None
    if full.width() * full.height() > MAX_DECODE_PIXELS and reader.format().data() not in (b"jpeg", b"jpg"):
        return None
    scaled = full.scaled(QSize(size, size), Qt.AspectRatioMode.KeepAspectRatio)
    if scaled.width() < full.width():
        reader.setScaledSize(scaled)
    image = reader.read()
    return None if image.isNull() else image


def read_pictures(paths: list[Path], size: int, mask_for: MaskFor | None) -> Pictures:
    """The previews of `paths` in order, the first with its loss mask tinted over it (`mask_for`)."""
    pictures = [read_preview(path, size) for path in paths]
    if mask_for is not None and pictures and pictures[0] is not None:
        pictures[0] = tinted(pictures[0], mask_for(paths[0]))
    return pictures


class PictureReader(QObject):
    """Reads one request at a time; of the requests made meanwhile only the last is read, and only the answer
    to the last request made is handed over."""

    def __init__(self, size: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.size = size
        self._worker = Worker(self)
        self._asked = 0  # requests made (and cancels): an answer to an earlier one is dropped
        self._reading = False
        self._wanted: tuple[int, list[Path], MaskFor | None, Callable[[Pictures], None]] | None = None

    @property
    def busy(self) -> bool:
        return self._reading or self._wanted is not None

    def ask(self, paths: list[Path], done: Callable[[Pictures], None], mask_for: MaskFor | None = None) -> None:
        """Read the previews of `paths`; `done(pictures)` follows on this thread unless another request comes
        first."""
        self._asked += 1
        self._wanted = (self._asked, paths, mask_for, done)
        if not self._reading:
            self._read_wanted()

    def cancel(self) -> None:
        """Hand over nothing for the requests made so far."""
        self._asked += 1
        self._wanted = None

    def _read_wanted(self) -> None:
        wanted, self._wanted = self._wanted, None
        if wanted is None:
            return
        number, paths, mask_for, done = wanted
        self._reading = True
        self._worker.run(read_pictures, paths, self.size, mask_for,
                         on_done=lambda pictures: self._read(number, done, pictures),
                         on_failed=lambda _error: self._read(number, done, [None] * len(paths)))

    def _read(self, number: int, done: Callable[[Pictures], None], pictures: Pictures) -> None:
        self._reading = False
        if number == self._asked:
            done(pictures)
        self._read_wanted()

    def shutdown(self) -> None:
        self.cancel()
        self._worker.shutdown(10.0)
