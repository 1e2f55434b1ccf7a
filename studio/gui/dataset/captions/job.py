"""A captioning job for the Dataset page: `studio-train caption --json --dry-run` in its own process.

The model (torch, transformers or onnxruntime) loads in that process, never in the window;
it writes nothing, and prints one message per line (core/dataset/captions/caption_messages), which
arrive here as signals. What is
written is decided in the review, through the page's caption store and undo stack.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from studio.core.config.schema import TrainConfig
from studio.core.dataset.captions.auto_caption import Mode
from studio.core.dataset.captions.caption_messages import (
    CAPTION_MESSAGES,
    CaptionJobFinished,
    CaptionJobProgress,
    CaptionJobStarted,
    CaptionProposed,
    CaptionWarning,
)
from studio.core.protocol.jsonlines import Message
from studio.core.runs.launch import training_python
from studio.core.studio_command import studio_command
from studio.core.training_python import NoTrainingPython, default_training_python
from studio.core.user_dirs import cache_dir
from studio.gui.base.questions import confirm
from studio.gui.runner.process import CommandProcess, Outcome

log = logging.getLogger(__name__)

STOP_GRACE_MS = 5000  # after asking the job to stop, how long it may finish its batch before it is killed


def caption_command(python: str | None, dataset: Path, model: str, mode: Mode, images_file: Path) -> list[str]:
    """The command that proposes captions for the images listed in `images_file`, writing nothing."""
    return studio_command(["caption", str(dataset), "--model", model, "--mode", mode,
                           "--images-from", str(images_file), "--json", "--dry-run"], python=python)


def captioning_python(config: TrainConfig | None) -> str | None:
    """The interpreter captions run in; None in the desktop app before its training environment is set up."""
    try:
        return training_python(config) if config is not None else default_training_python()
    except NoTrainingPython:
        return None


def ask_stop_captioning(parent: QWidget) -> bool:
    """Close, Escape or the title bar's cross while a model captions: True when the person stops it."""
    return confirm(parent, "Captioning is running", "Stop captioning and close this window? The captions proposed "
                   "so far stay, to review when you press Caption with… again.", "Stop and close",
                   QMessageBox.Icon.Question)


class CaptionJob(QObject):
    """One captioning process at a time (the runner's CommandProcess); its messages become the signals below."""

    sig_started = Signal(dict)  # model, kind, device, precision, total, ...
    sig_caption = Signal(object)  # MachineCaption
    sig_progress = Signal(int, int)  # done, total
    sig_warning = Signal(str)
    sig_finished = Signal(str, str)  # status (completed | stopped | failed), message

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.process = CommandProcess(self)
        self.process.sig_message.connect(self._handle)
        self.process.sig_finished.connect(self._on_finished)
        self._list_file: Path | None = None
        self._finished_message: CaptionJobFinished | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self.process.is_running()

    @property
    def malformed_lines(self) -> int:
        return self.process.malformed_lines

    def start(self, python: str, dataset: Path, model: str, mode: Mode, images: Sequence[Path]) -> None:
        """Caption `images` of the dataset at `dataset` (an image folder or a project folder)."""
        if self.running:
            raise RuntimeError("a captioning job is already running")
        folder = cache_dir() / "caption-jobs"
        folder.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix="images-", suffix=".txt", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8") as listing:
            listing.write("".join(f"{image}\n" for image in images))
        self._list_file = Path(name)
        self._finished_message, self._stopping = None, False
        command = caption_command(python, dataset, model, mode, self._list_file)
        self.process.start_messages(command, CAPTION_MESSAGES)

    def stop(self) -> None:
        """Ask the job to stop after its batch (the proposals so far stay); killed if it does not."""
        if not self.running or self._stopping:
            return
        self._stopping = True
        self.process.terminate(STOP_GRACE_MS)

    def kill_now(self) -> None:
        """End the job and wait for it (closing the dialog or the window)."""
        self.process.kill_now(5.0)

    def _handle(self, message: Message) -> None:
        if isinstance(message, CaptionJobStarted):
            self.sig_started.emit(message.to_dict())
        elif isinstance(message, CaptionProposed):
            try:
                caption = message.machine_caption()
            except ValueError as exc:
                log.warning("skipped a caption from the job: %s", exc)
                return
            self.sig_caption.emit(caption)
        elif isinstance(message, CaptionJobProgress):
            self.sig_progress.emit(message.done, message.total)
        elif isinstance(message, CaptionWarning):
            self.sig_warning.emit(message.message)
        elif isinstance(message, CaptionJobFinished):
            self._finished_message = message

    def _on_finished(self, outcome: Outcome) -> None:
        finished = self._finished_message
        if outcome.how == "failed to start":
            self._done("failed", f"{outcome.message} Check launch.python in the project's settings "
                                 "(the training environment).", outcome)
        elif finished is not None and finished.status in ("completed", "stopped", "failed"):
            self._done(finished.status, finished.message, outcome)
        elif self._stopping:
            self._done("stopped", "", outcome)
        else:
            self._done("failed", "The captioning process ended unexpectedly: "
                                 f"{outcome.last_words() or f'exit code {outcome.code}'}", outcome)

    def _done(self, status: str, message: str, outcome: Outcome) -> None:
        if self._list_file is not None:
            with contextlib.suppress(OSError):
                self._list_file.unlink()
            self._list_file = None
        if status == "failed" and not message:
            message = outcome.last_words() or "the captioner failed"
        self.sig_finished.emit(status, message)
