"""Help → Documentation (F1): the user guide shown in the studio, rendered, its links followed.

The guide is Markdown (docs/*.md, shipped with the app); a desktop may have no program for
.md files, or open them as plain text in an editor, so the studio renders it itself.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QDialog, QHBoxLayout, QPushButton, QTextBrowser, QVBoxLayout, QWidget

from studio.gui.base.desktop import open_with_desktop
from studio.gui.base.names import named


def about_text(version: str) -> str:
    """Help → About: the studio and every family it trains, as their declarations name them."""
    from studio.core.families import FAMILY_NAMES, title

    titles = [title(name) for name in FAMILY_NAMES]
    families = ", ".join(titles[:-1]) + f" and {titles[-1]}" if len(titles) > 1 else titles[0]
    return (f"<h3>Training Studio {version}</h3><p>Fine-tune {families} with LoRA, LyCORIS and DreamBooth on "
            "your own GPU, or export the run for rented GPUs.</p>")


class HelpWindow(QDialog):
    """The guide at `index`; links to the other pages and their images work, web links open outside."""

    def __init__(self, index: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("help_window")
        self.setWindowTitle("Training Studio: user guide")
        self.index = index
        self.browser = named(QTextBrowser(), "help_browser")
        self.browser.setOpenExternalLinks(True)
        self.browser.setSearchPaths([str(index.parent)])
        back = QPushButton("Back")
        back.clicked.connect(self.browser.backward)
        self.browser.backwardAvailable.connect(back.setEnabled)
        back.setEnabled(False)
        home = QPushButton("Contents")
        home.clicked.connect(self.show_index)
        outside = QPushButton("Open the file elsewhere…")
        outside.setToolTip(f"Open {index} in another program")
        outside.clicked.connect(lambda: open_with_desktop(self, self.current_file(), "the documentation"))
        row = QHBoxLayout()
        for button in (back, home):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(outside)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.browser, 1)
        self.resize(900, 760)
        self.show_index()

    def show_index(self) -> None:
        if self.index.is_file():
            self.browser.setSource(QUrl.fromLocalFile(str(self.index)), QTextDocument.ResourceType.MarkdownResource)
        else:
            self.browser.setPlainText(f"The user guide is not where the studio expects it: {self.index} is missing. "
                                      "Reinstall the app, or read docs/index.md in the studio's source.")

    def current_file(self) -> Path:
        """The page shown (a link followed from the guide is relative to it)."""
        source = QUrl.fromLocalFile(str(self.index)).resolved(self.browser.source())
        return Path(source.toLocalFile()) if source.isLocalFile() and source.toLocalFile() else self.index


def open_help(parent: QWidget, page: Path) -> HelpWindow:
    """The user guide's window of `parent` (one: shown again and raised when it is open already)."""
    window = parent.findChild(HelpWindow, "help_window")
    if window is None:
        window = HelpWindow(page, parent)
    window.show()
    window.raise_()
    return window
