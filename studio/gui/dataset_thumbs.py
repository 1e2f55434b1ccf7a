"""Thumbnails made off the GUI thread and kept in a disk cache keyed by path, size and mtime."""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal
from PySide6.QtGui import QImage, QPixmap

THUMB_SIZE = 128
# Non-JPEG images past this many pixels are not decoded for a thumbnail (JPEG decodes at 1/8 scale).
MAX_DECODE_PIXELS = 60_000_000
MEMORY_THUMBS = 800  # pixmaps kept in memory (~50 MB); the disk cache holds the rest


def cache_dir() -> Path:
    """The thumbnail cache folder: $STUDIO_CACHE_DIR/thumbnails when set, else the user cache dir."""
    root = os.environ.get("STUDIO_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("sd-training-studio", appauthor=False)
    folder = Path(root) / "thumbnails"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def cache_key(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    raw = f"{path}|{st.st_size}|{st.st_mtime_ns}|{THUMB_SIZE}".encode("utf-8", "surrogateescape")
    return hashlib.sha1(raw).hexdigest()


def make_thumbnail(path: Path, folder: Path) -> QImage:
    """The thumbnail of `path`, from the cache or freshly made (and cached); a null QImage when unreadable."""
    key = cache_key(path)
    if key is None:
        return QImage()
    cached = folder / key[:2] / f"{key}.jpg"
    if cached.exists():
        image = QImage(str(cached))
        if not image.isNull():
            return image
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as im:
            if im.format != "JPEG" and im.width * im.height > MAX_DECODE_PIXELS:
                return QImage()
            im.draft("RGB", (THUMB_SIZE * 2, THUMB_SIZE * 2))
            upright = ImageOps.exif_transpose(im)
            upright.thumbnail((THUMB_SIZE, THUMB_SIZE))
            rgb = upright.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return QImage()
    cached.parent.mkdir(exist_ok=True)
    tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
    try:
        rgb.save(tmp, "JPEG", quality=85)
        os.replace(tmp, cached)
    except OSError:
        pass  # a full or read-only cache only costs the next visit a rebuild
    data = rgb.tobytes()
    return QImage(data, rgb.width, rgb.height, rgb.width * 3, QImage.Format.Format_RGB888).copy()


class _Signals(QObject):
    done = Signal(str, QImage)


class _ThumbJob(QRunnable):
    def __init__(self, path: Path, folder: Path, signals: _Signals) -> None:
        super().__init__()
        self.path, self.folder, self.signals = path, folder, signals

    def run(self) -> None:
        try:
            image = make_thumbnail(self.path, self.folder)
        except Exception:  # one bad file must not end the worker; it shows as unreadable
            image = QImage()
        self.signals.done.emit(str(self.path), image)


class ThumbnailLoader(QObject):
    """Hands out pixmaps it has and makes the others in a thread pool, newest requests first."""

    sig_ready = Signal(str)  # path whose thumbnail arrived

    def __init__(self, parent: QObject | None = None, folder: Path | None = None) -> None:
        super().__init__(parent)
        self.folder = folder or cache_dir()
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max(1, min(4, (os.cpu_count() or 2) - 1)))
        self._signals = _Signals(self)
        self._signals.done.connect(self._arrived)
        self._pixmaps: OrderedDict[str, QPixmap] = OrderedDict()
        self._failed: set[str] = set()
        self._pending: set[str] = set()
        self._priority = 0

    def pixmap(self, path: Path) -> QPixmap | None:
        """The thumbnail if ready; otherwise None and it is queued."""
        key = str(path)
        found = self._pixmaps.get(key)
        if found is not None:
            self._pixmaps.move_to_end(key)
            return found
        if key not in self._pending and key not in self._failed:
            self._pending.add(key)
            self._priority += 1
            # Later requests (rows just scrolled into view) run first.
            self.pool.start(_ThumbJob(path, self.folder, self._signals), min(self._priority, 2**30))
        return None

    def failed(self, path: Path) -> bool:
        return str(path) in self._failed

    def forget(self, path: Path) -> None:
        self._pixmaps.pop(str(path), None)
        self._failed.discard(str(path))

    def _arrived(self, key: str, image: QImage) -> None:
        self._pending.discard(key)
        if image.isNull():
            self._failed.add(key)
        else:
            self._pixmaps[key] = QPixmap.fromImage(image)
            while len(self._pixmaps) > MEMORY_THUMBS:
                self._pixmaps.popitem(last=False)
        self.sig_ready.emit(key)

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def shutdown(self) -> None:
        self.pool.clear()
        self.pool.waitForDone(5000)
