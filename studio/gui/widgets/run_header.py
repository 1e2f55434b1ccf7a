"""The run header (state, step, epoch, times, loss, speed) and the error banner."""

from __future__ import annotations

import html
import time

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.core.runs.records.run_model import RunModel

_STATUS_COLOURS = {
    "finished": "#2e7d32", "failed": "#c62828", "stopped": "#ef6c00",
    "training": "#1565c0", "sampling": "#6a1b9a", "saving": "#6a1b9a", "compiling": "#00838f",
}


def format_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "–"
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RunHeader(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("run_header")
        self.status = QLabel("no run")
        self.status.setObjectName("run_status")
        self.run_name = QLabel("")
        self.progress = QProgressBar()
        self.progress.setObjectName("run_progress")
        self.progress.setTextVisible(True)
        self.step = QLabel("–")
        self.step.setObjectName("run_step")
        self.epoch = QLabel("–")
        self.elapsed = QLabel("–")
        self.eta = QLabel("–")
        self.loss = QLabel("–")
        self.loss.setObjectName("run_loss")
        self.speed = QLabel("–")
        self.speed.setObjectName("run_speed")
        self.speed.setToolTip("Images per second over the last ~20 steps; with a known model and GPU also the "
                              "model's TFLOP/s per GPU and MFU (the share of the GPU's bf16/fp16 peak)")
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.status, 0, 0)
        grid.addWidget(self.run_name, 0, 1, 1, 3)
        grid.addWidget(self.progress, 0, 4, 1, 8)
        for col, (title, label) in enumerate(
            (("Step", self.step), ("Epoch", self.epoch), ("Elapsed", self.elapsed), ("ETA", self.eta),
             ("Loss", self.loss), ("Speed", self.speed))
        ):
            grid.addWidget(QLabel(f"<small>{title}</small>"), 1, col * 2)
            grid.addWidget(label, 1, col * 2 + 1)

    def refresh(self, model: RunModel, stopping: bool = False) -> None:
        if model.run_dir is None and not model.event_count:
            status = "no run"
        else:
            status = model.status if model.event_count or model.ended else "preparing"
        text = "stopping…" if stopping and not model.ended else status
        colour = _STATUS_COLOURS.get(status, "#455a64")
        self.status.setText(f"<b style='color:{colour}'>{text}</b>")
        self.run_name.setText(model.run_dir.name if model.run_dir else "")
        total = model.total_steps
        self.step.setText(f"{model.step} / {total}" if total else str(model.step))
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(min(model.step, max(total, 1)))
        if model.status in ("caching", "sampling") and model.phase_total:
            self.progress.setFormat(f"{model.phase} {model.phase_done}/{model.phase_total}")
        elif model.status == "compiling":
            self.progress.setFormat("compiling the denoiser…")
        else:
            self.progress.setFormat("%p%")
        # Step events count epochs from 0, as the data order does; a person counts from 1.
        self.epoch.setText(str(model.epoch + 1) if len(model.steps) else "–")
        self.elapsed.setText(format_duration(model.elapsed_s(time.time())))
        self.eta.setText(format_duration(model.eta_s) if not model.ended else "–")
        self.loss.setText(f"{model.last_loss:.4f}" if model.last_loss is not None else "–")
        self.speed.setText(speed_text(model))


def speed_text(model: RunModel) -> str:
    """The speed as far as the run knows it, e.g. `4.1 img/s · 142 TFLOP/s · 18% MFU · compiled in 41 s`."""
    images, tflops, mfu = model.speed()
    # A big model on a small card trains an image in 20 s or more: 0.04 img/s, never "0.0 img/s".
    parts = [f"{images:.1f} img/s" if images >= 1 else f"{images:.2g} img/s"] if images else []
    if tflops is not None:
        parts.append(f"{tflops:.0f} TFLOP/s" if tflops >= 10 else f"{tflops:.1f} TFLOP/s")
    if mfu is not None:
        parts.append(f"{mfu:.0%} MFU")
    if model.status == "compiling":
        parts.append("compiling…")
    elif model.compile_s is not None:
        parts.append(f"compiled in {model.compile_s:.0f} s")
    return " · ".join(parts) or "–"


class ErrorBanner(QFrame):
    """What went wrong, the hint, and a jump to the console line."""

    sig_show_console = Signal(str)  # text to find in the console

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("error_banner")
        self.setStyleSheet("#error_banner{background:#fdecea;border:1px solid #f5c2c0;border-radius:4px}")
        self.title = QLabel()
        self.title.setObjectName("error_text")
        self.title.setWordWrap(True)
        self.hint = QLabel()
        self.hint.setObjectName("error_hint")
        self.hint.setWordWrap(True)
        self.jump = QPushButton("Show in console")
        self.jump.setObjectName("error_jump")
        self.close_button = QPushButton("Dismiss")
        self._needle = ""
        self.jump.clicked.connect(lambda: self.sig_show_console.emit(self._needle))
        self.close_button.clicked.connect(self.hide)
        text = QVBoxLayout()
        text.addWidget(self.title)
        text.addWidget(self.hint)
        row = QHBoxLayout(self)
        row.addLayout(text, 1)
        row.addWidget(self.jump)
        row.addWidget(self.close_button)
        self._shown_key: tuple[str, str] | None = None
        self.hide()

    def clear(self) -> None:
        """Hide the error and forget it: the next run (or the project opened) shows its own, even the same."""
        self._shown_key = None
        self.hide()

    def show_error(self, message: str, hint: str = "", needle: str = "") -> None:
        self._shown_key = (message, hint)
        # Shown as it was said: an error names "<class 'NoneType'>", a prompt "<sks>", which rich text would drop.
        lines = html.escape(message, quote=False).splitlines()
        self.title.setText(f"<b>{'<br>'.join(lines)}</b>")
        self.hint.setText(hint)
        self.hint.setVisible(bool(hint))
        self._needle = needle or message.splitlines()[0] if message else needle
        self.show()

    def refresh(self, model: RunModel) -> None:
        """Show the newest error event, or the reason a run ended without one."""
        if model.errors:
            err = model.errors[-1]
            # A failed sample says so itself, and the run went on: no "sample:" label to alarm.
            title = err.message if err.kind == "sample" else f"{err.kind}: {err.message}"
            key = (title, err.hint)
            if key != self._shown_key:
                self.show_error(key[0], err.hint, err.message.splitlines()[0] if err.message else "")
        elif model.status == "failed" and model.message and self._shown_key != (model.message, ""):
            self.show_error(model.message, "", "Traceback")
