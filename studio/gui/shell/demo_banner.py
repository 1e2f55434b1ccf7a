"""The banner over the pages while the demo project is open: what the demo is and what to do next.

A status-bar line is overwritten by the next message; this stays until the person hides it.
"""

from __future__ import annotations

import re
import time

from PySide6.QtCore import QSettings, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

HIDDEN_KEY = "demo/banner_hidden"

ABOUT = ("<b>This is the demo project:</b> 24 pictures of shapes, each with a caption, and a tiny "
         "Stable Diffusion 1.5 model with random weights, built on this machine, so a whole training "
         "run takes about a minute, even on a CPU. <b>Next: open Train and press Train.</b> "
         "The sample images it makes are noise: a random model cannot draw yet. The demo shows the "
         "studio at work (captions, live plots, samples, Stop and Resume), not a good model. "
         "For your own pictures: File → New Project.")
BUILDING = "Building the tiny model"
# Measured: about 15 s on an idle desktop, about a minute on a busy 2-core machine (mostly loading PyTorch).
BUILD_ESTIMATE = "under a minute; longer on a busy machine"
READY = "The tiny model is ready."
_STEP = re.compile(r"^step (\d+) of (\d+): (.+)$")


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
        self.model_state.setWordWrap(True)
        self.build_bar = QProgressBar()
        self.build_bar.setObjectName("demo_banner_build_progress")
        self.build_bar.setTextVisible(False)
        self.build_bar.setMaximumHeight(8)
        self.build_bar.setVisible(False)
        self._build_started = 0.0
        self._build_step = "starting Python"
        self._build_timer = QTimer(self, interval=1000)
        self._build_timer.timeout.connect(self._show_build)
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
        text.addWidget(self.build_bar)
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
        """What became of the build (ready, failed): the progress ends."""
        self._build_timer.stop()
        self.build_bar.setVisible(False)
        self.model_state.setText(text)

    def building(self) -> None:
        """The build started: its step, a bar and the seconds so far, until set_model_state."""
        self._build_started, self._build_step = time.monotonic(), "starting Python"
        self.build_bar.setRange(0, 0)  # busy until the builder names its steps
        self.build_bar.setVisible(True)
        self._build_timer.start()
        self._show_build()

    def build_output(self, line: str) -> None:
        """A line the builder printed: "step N of M: what" moves the bar on."""
        match = _STEP.match(line.strip())
        if match is None or not self._build_timer.isActive():
            return
        number, steps = int(match.group(1)), int(match.group(2))
        self.build_bar.setRange(0, steps)
        self.build_bar.setValue(number - 1)
        self._build_step = f"{match.group(3)} (step {number} of {steps})"
        self._show_build()

    def _show_build(self) -> None:
        seconds = time.monotonic() - self._build_started
        self.model_state.setText(f"{BUILDING}: {self._build_step}… {seconds:.0f} s so far ({BUILD_ESTIMATE}).")

    def hide_for_good(self) -> None:
        self.settings.setValue(HIDDEN_KEY, True)
        self.setVisible(False)
