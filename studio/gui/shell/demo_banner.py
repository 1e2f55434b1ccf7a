"""The banner over the pages while the demo project is open: what the demo is and what to do next.

A status-bar line is overwritten by the next message; this stays until the person hides it.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

HIDDEN_KEY = "demo/banner_hidden"

ABOUT = ("<b>This is the demo project:</b> 24 pictures of shapes, each with a caption, and a tiny "
         "Stable Diffusion 1.5 model with random weights, built on this machine, so a whole training "
         "run takes about a minute, even on a CPU. <b>Next: open Train and press Train.</b> "
         "The sample images it makes are noise: a random model cannot draw yet. The demo shows the "
         "studio at work (captions, live plots, samples, Stop and Resume), not a good model. "
         "For your own pictures: File → New Project.")
BUILDING = "The tiny model is being built (a few seconds)…"
READY = "The tiny model is ready."


class DemoBanner(QFrame):
    """`sig_go_train` asks the window to show the Train page."""

    sig_go_train = Signal()

    def __init__(self, settings: QSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("demo_banner")
        self.setStyleSheet("#demo_banner{background:#e8f4fd;border:1px solid #b6dcf7;border-radius:4px}"
                           "#demo_banner QLabel{color:#0b3954}")
        self.settings = settings
        self.text = QLabel(ABOUT)
        self.text.setObjectName("demo_banner_text")
        self.text.setWordWrap(True)
        self.model_state = QLabel()
        self.model_state.setObjectName("demo_banner_model")
        go = QPushButton("Go to Train")
        go.setObjectName("demo_banner_train")
        go.clicked.connect(self.sig_go_train.emit)
        hide = QPushButton("Hide")
        hide.setObjectName("demo_banner_hide")
        hide.setToolTip("Hide this note for good (the demo stays in File → Open Demo Project)")
        hide.clicked.connect(self.hide_for_good)
        text = QVBoxLayout()
        text.addWidget(self.text)
        text.addWidget(self.model_state)
        buttons = QVBoxLayout()
        buttons.addWidget(go)
        buttons.addWidget(hide)
        buttons.addStretch(1)
        row = QHBoxLayout(self)
        row.addLayout(text, 1)
        row.addLayout(buttons)
        self.setVisible(False)

    def show_for(self, demo: bool) -> None:
        self.setVisible(demo and not self.settings.value(HIDDEN_KEY, False, type=bool))

    def set_model_state(self, text: str) -> None:
        self.model_state.setText(text)

    def hide_for_good(self) -> None:
        self.settings.setValue(HIDDEN_KEY, True)
        self.setVisible(False)
