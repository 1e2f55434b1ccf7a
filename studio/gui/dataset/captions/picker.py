"""Caption with…'s model choice: the captioners the studio knows (with their size, those not on this machine
marked), a folder of one's own (Folder…), and Download for a known one not here yet.

The download runs `studio-train download --captioner NAME` in its own process (gui/widgets/downloads),
into the Hugging Face cache, where the caption job finds it by name.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QPushButton, QWidget

from studio.core.dataset.captions.captioner_models import (
    KNOWN_CAPTIONERS,
    available_captioners,
    captioners_dir,
    known_captioner,
)
from studio.gui.base.names import named
from studio.gui.widgets.downloads import DownloadDialog

NOT_DOWNLOADED = " — not downloaded"


class CaptionerPicker(QWidget):
    """The Model row: a list of captioners (editable: a folder may be typed), Folder… and Download."""

    sig_changed = Signal()  # the choice changed, or a download made the chosen model present
    sig_downloaded = Signal(str)  # the captioner's name, once its files are on this machine

    def __init__(self, python: str | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.python = python  # the training environment's interpreter: the download runs there
        self.download_dialog: DownloadDialog | None = None
        self.combo = named(QComboBox(), "caption_model")
        self.combo.setEditable(True)
        self.fill()
        present = available_captioners()
        self.combo.setCurrentIndex(next((i for i, m in enumerate(KNOWN_CAPTIONERS) if m.name in present), 0))
        self.combo.currentTextChanged.connect(lambda _text: self._changed())
        line = self.combo.lineEdit()
        if line is not None:
            line.setPlaceholderText("a model folder, or a downloaded model's name")
        browse = QPushButton("Folder…")
        browse.clicked.connect(self._browse)
        self.download_button = named(QPushButton("Download"), "caption_download")
        self.download_button.setToolTip("Download the chosen captioner from the Hugging Face hub (once)")
        self.download_button.clicked.connect(self.download)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo, 1)
        row.addWidget(browse)
        row.addWidget(self.download_button)
        self._update_download()

    def fill(self) -> None:
        """Every captioner the studio knows, with its size (those not on this machine say so), then other
        folders in the captioners' folder; the choice stays where it was."""
        chosen = self.combo.currentIndex()
        present = available_captioners()
        self.combo.blockSignals(True)
        self.combo.clear()
        for known in KNOWN_CAPTIONERS:
            self.combo.addItem(known.title + ("" if known.name in present else NOT_DOWNLOADED), known.name)
        for folder in present:
            if known_captioner(folder) is None:
                self.combo.addItem(folder, folder)
        if chosen >= 0:
            self.combo.setCurrentIndex(min(chosen, self.combo.count() - 1))
        self.combo.blockSignals(False)

    def choose(self, name_or_folder: str) -> None:
        index = self.combo.findData(name_or_folder)
        if index >= 0:
            self.combo.setCurrentIndex(index)
        else:
            self.combo.setCurrentText(name_or_folder)

    def chosen_model(self) -> str:
        """The model's name (a known one chosen from the list) or the folder typed or chosen."""
        text = self.combo.currentText().strip()
        index = self.combo.findText(text)
        return str(self.combo.itemData(index)) if index >= 0 and self.combo.itemData(index) else text

    def not_here(self) -> str:
        """What to do when the chosen known model has no files on this machine; "" when it has them."""
        known = known_captioner(self.chosen_model())
        if known is None or known.name in available_captioners():
            return ""
        return (f"{known.name} is not on this machine. Press Download to fetch it (about {known.size_mb} MB, "
                f"from huggingface.co/{known.repo}); offline, put the files of {known.repo} in "
                f"{captioners_dir() / known.name}, or choose the folder of a captioning model you have with "
                "Folder….")

    def download(self) -> DownloadDialog | None:
        """Fetch the chosen known captioner; the list says it is downloaded when the files are here."""
        known = known_captioner(self.chosen_model())
        if known is None or not self.not_here():
            return None
        dialog = DownloadDialog(known.repo, python=self.python, parent=self, captioner=known.name)
        dialog.sig_done.connect(lambda _repo, _path, name=known.name: self._downloaded(name))
        self.download_dialog = dialog
        dialog.show()
        dialog.start()
        return dialog

    def _downloaded(self, name: str) -> None:
        self.fill()
        self._changed()
        self.sig_downloaded.emit(name)

    def _changed(self) -> None:
        self._update_download()
        self.sig_changed.emit()

    def _update_download(self) -> None:
        self.download_button.setEnabled(bool(self.not_here()))

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder of a captioning model")
        if folder:
            self.combo.setCurrentText(folder)

    def shutdown(self) -> None:
        if self.download_dialog is not None:
            self.download_dialog.process.cancel()
