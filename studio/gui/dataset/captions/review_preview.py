"""The right-hand side of Caption with…'s review: the chosen image (decoded off the GUI thread), the caption it
would get with its token count, and the tag-score thresholds."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QFormLayout, QLabel, QSlider, QWidget

from studio.core.dataset.captions.auto_caption import (
    DEFAULT_CHARACTER_THRESHOLD,
    DEFAULT_GENERAL_THRESHOLD,
    TAG_SCORE_FLOOR,
)
from studio.gui.base.names import named
from studio.gui.dataset.editor.picture_reader import LOADING_TEXT, UNREADABLE_TEXT, PictureReader

PREVIEW_SIZE = 256


def _slider(name: str, value: float) -> QSlider:
    slider = named(QSlider(Qt.Orientation.Horizontal), name)
    slider.setRange(round(TAG_SCORE_FLOOR * 100), 100)
    slider.setValue(round(value * 100))
    return slider


class ProposalPreview(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.image_label = QLabel()
        self.pictures = PictureReader(PREVIEW_SIZE, self)  # a 100 MB image is decoded off the GUI thread
        self.image_label.setFixedSize(QSize(PREVIEW_SIZE, PREVIEW_SIZE))
        self.image_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.text = named(QLabel(), "caption_preview")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tokens = named(QLabel(), "caption_preview_tokens")
        self.general = _slider("caption_general_threshold", DEFAULT_GENERAL_THRESHOLD)
        self.character = _slider("caption_character_threshold", DEFAULT_CHARACTER_THRESHOLD)
        self.general_label, self.character_label = QLabel(), QLabel()
        self._image: Path | None = None
        form = QFormLayout(self)
        form.addRow(self.image_label)
        form.addRow(self.text)
        form.addRow(self.tokens)
        form.addRow(self.general_label, self.general)
        form.addRow(self.character_label, self.character)

    def show_image(self, image: Path | None, text: str = "", tokens: str = "") -> None:
        """`image` with the caption it would get and its token count; None: nothing."""
        self._image = image
        self.text.setText(text)
        self.tokens.setText(tokens)
        if image is None:
            self.image_label.clear()
            self.pictures.cancel()
            return
        self.image_label.setText(LOADING_TEXT)
        self.pictures.ask([image], lambda pictures: self._read(image, pictures[0]))

    def _read(self, image: Path, picture: QImage | None) -> None:
        if image != self._image:
            return
        if picture is None:
            self.image_label.setText(UNREADABLE_TEXT)
        else:
            self.image_label.setPixmap(QPixmap.fromImage(picture))
