"""An image shown whole at any size: scaled to fit, never cropped or stretched (a portrait stays a portrait)."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QMouseEvent, QPainter, QPaintEvent, QPixmap
from PySide6.QtWidgets import QSizePolicy, QWidget


class ImageView(QWidget):
    """Holds the full pixmap and paints it scaled into its own rectangle, keeping the aspect ratio;
    with no image, a line of text. A click emits `sig_clicked`."""

    sig_clicked = Signal()

    def __init__(self, text: str = "", parent: QWidget | None = None, upscale: bool = False) -> None:
        super().__init__(parent)
        self._pixmap = QPixmap()
        self._text = text
        # A sample of a tiny model (64 px) fills the preview instead of sitting as a dot in its middle.
        self.upscale = upscale
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumSize(96, 96)

    def set_pixmap(self, pixmap: QPixmap | None) -> None:
        self._pixmap = pixmap if pixmap is not None else QPixmap()
        self.update()

    def pixmap(self) -> QPixmap:
        return self._pixmap

    def set_text(self, text: str) -> None:
        """Show `text` instead of an image."""
        self._pixmap = QPixmap()
        self._text = text
        self.update()

    def text(self) -> str:
        return "" if not self._pixmap.isNull() else self._text

    def image_rect(self) -> QRect:
        """Where the image is drawn: the largest rectangle of its aspect ratio inside the widget, centred."""
        if self._pixmap.isNull():
            return QRect()
        size = self._pixmap.size().scaled(self.size(), Qt.AspectRatioMode.KeepAspectRatio)
        if not self.upscale and size.width() > self._pixmap.width() and size.height() > self._pixmap.height():
            size = self._pixmap.size()  # small images are not blown up past their pixels
        x = (self.width() - size.width()) // 2
        y = (self.height() - size.height()) // 2
        return QRect(x, y, size.width(), size.height())

    def sizeHint(self) -> QSize:
        return QSize(256, 256)

    def paintEvent(self, _event: QPaintEvent) -> None:
        painter = QPainter(self)
        if self._pixmap.isNull():
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, self._text)
        else:
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
            painter.drawPixmap(self.image_rect(), self._pixmap)
        painter.end()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.sig_clicked.emit()
        super().mousePressEvent(event)
