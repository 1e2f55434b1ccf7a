"""Downloading a base model (or a captioning model) from the GUI: `studio-train download ID --json` in the runner's process
wrapper, shown as a progress bar.

The download runs in its own process (huggingface_hub and the network never touch the
window's process); its messages (core/models/download_messages) carry bytes, rate and time
left. A gated model asks for a token, which goes straight to the system keyring.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.core.models.download_messages import (
    DOWNLOAD_MESSAGES,
    DownloadDone,
    DownloadFailed,
    DownloadProgressed,
)
from studio.core.models.downloads import TOKEN_REFUSED, DownloadProgress, progress_text
from studio.core.models.hub_token import TokenStoreError, store_token
from studio.core.protocol.jsonlines import Message
from studio.core.studio_command import studio_command
from studio.core.training_python import NoTrainingPython
from studio.gui.runner.process import CommandProcess, Outcome


def download_command(repo_id: str, with_t5: bool = False, python: str | None = None,
                     captioner: str | None = None) -> list[str]:
    """`studio-train download ID --json` as this app runs it (in the frozen app: the training environment);
    `captioner`: `download --captioner NAME --json`, a captioning model the studio knows."""
    if captioner:
        return studio_command(["download", "--captioner", captioner, "--json"], python=python)
    return studio_command(["download", repo_id, "--json", *(["--with-t5"] if with_t5 else [])], python=python)


class DownloadProcess(QObject):
    """One `studio-train download` at a time (the runner's CommandProcess); its messages become signals."""

    sig_progress = Signal(object)  # DownloadProgress
    sig_done = Signal(str)  # the snapshot folder
    sig_failed = Signal(str, bool)  # message, whether a token would help (a gated model)

    def __init__(self, python: str | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.python = python  # None: the training environment's (studio/core/studio_command.py)
        self.program = ""
        self.process = CommandProcess(self)
        self.process.sig_message.connect(self._handle)
        self.process.sig_finished.connect(self._finished)
        self._ended = False

    @property
    def running(self) -> bool:
        return self.process.is_running()

    def start(self, repo_id: str, with_t5: bool = False, captioner: str | None = None) -> None:
        self.cancel()
        try:
            command = download_command(repo_id, with_t5, self.python, captioner)
        except NoTrainingPython as exc:  # the frozen app downloads with the training environment's libraries
            self.sig_failed.emit(f"The download cannot start yet: {exc}.", False)
            return
        self.program = command[0]
        self._ended = False
        self.process.start_messages(command, DOWNLOAD_MESSAGES)

    def cancel(self) -> None:
        """End a running download; what it fetched stays and the next one resumes from there."""
        if self.running:
            self._ended = True
            self.process.kill_now(3.0)

    def _handle(self, message: Message) -> None:
        if isinstance(message, DownloadProgressed):
            self.sig_progress.emit(message.progress())
        elif isinstance(message, DownloadDone):
            self._ended = True
            self.sig_done.emit(message.path)
        elif isinstance(message, DownloadFailed):
            self._ended = True
            self.sig_failed.emit(message.message, message.gated)

    def _finished(self, outcome: Outcome) -> None:
        if self._ended:
            return
        self._ended = True
        if outcome.how == "failed to start":
            self.sig_failed.emit(f"The download could not start: {self.program} was not found.", False)
        else:
            self.sig_failed.emit(f"The download ended (exit code {outcome.code}): {outcome.last_words() or 'no message'}",
                                 False)


class DownloadDialog(QDialog):
    """A progress bar with bytes, rate and time left; Cancel keeps what was fetched for the next try."""

    sig_done = Signal(str, str)  # hub id, snapshot folder

    def __init__(self, repo_id: str, with_t5: bool = False, python: str | None = None,
                 parent: QWidget | None = None, captioner: str | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("download_dialog")
        self.setWindowTitle(f"Downloading {repo_id}")
        self.repo_id, self.with_t5, self.captioner = repo_id, with_t5, captioner
        self.result_path: str | None = None
        self.error: str | None = None
        self.bar = QProgressBar()
        self.bar.setObjectName("download_bar")
        self.bar.setRange(0, 1000)
        self.label = QLabel("Starting…")
        self.label.setObjectName("download_status")
        self.label.setWordWrap(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        # After a failure (offline, the hub down) or a cancel: the same download again, from what was fetched.
        self.retry_button = QPushButton("Retry")
        self.retry_button.setObjectName("download_retry")
        self.retry_button.setVisible(False)
        self.retry_button.clicked.connect(self.retry)
        layout = QVBoxLayout(self)
        needs = "captioning" if captioner else "training"
        layout.addWidget(QLabel(f"<b>{repo_id}</b>: only the files {needs} needs"))
        layout.addWidget(self.bar)
        layout.addWidget(self.label)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.retry_button)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        self.resize(560, 150)
        self.process = DownloadProcess(python, self)
        self.process.sig_progress.connect(self._progress)
        self.process.sig_done.connect(self._done)
        self.process.sig_failed.connect(self._failed)

    def start(self) -> None:
        self.error = None
        self.retry_button.setVisible(False)
        self.cancel_button.setText("Cancel")
        self.process.start(self.repo_id, self.with_t5, self.captioner)

    def retry(self) -> None:
        self.label.setText("Starting again…")
        self.start()

    def _progress(self, progress: DownloadProgress) -> None:
        if progress.total_bytes:
            self.bar.setValue(int(1000 * progress.done_bytes / progress.total_bytes))
        self.label.setText(progress_text(progress))

    def _done(self, path: str) -> None:
        self.result_path = path
        self.bar.setValue(1000)
        self.label.setText(f"Ready: {path}")
        self.cancel_button.setText("Close")
        self.sig_done.emit(self.repo_id, path)
        self.accept()

    def _failed(self, message: str, gated: bool) -> None:
        self.error = message
        self.label.setText(f"{message}\nPress Retry to try again (what was fetched is kept).")
        self.cancel_button.setText("Close")
        self.retry_button.setVisible(True)
        if gated and self.ask_token():
            self.start()

    def ask_token(self) -> bool:
        """Ask for a Hugging Face token and keep it in the system keyring; False when none was given."""
        why = (f"{TOKEN_REFUSED} kept for downloads (it has expired or was revoked): paste a new one"
               if (self.error or "").startswith(TOKEN_REFUSED) else
               f"{self.repo_id} is gated: accept its licence on huggingface.co while signed in, then paste a token "
               "of that account")
        token, ok = QInputDialog.getText(
            self, "A token is needed", f"{why} (huggingface.co/settings/tokens). It is kept in the system keyring.",
            QLineEdit.EchoMode.Password)
        if not ok or not token.strip():
            return False
        try:
            store_token(token)
        except TokenStoreError as exc:
            self.label.setText(str(exc))
            return False
        return True

    def cancel(self) -> None:
        if self.process.running:
            self.process.cancel()
            self.label.setText("Cancelled: what was fetched is kept; Retry resumes from there.")
            self.cancel_button.setText("Close")
            self.retry_button.setVisible(True)
            return
        self.reject()

    def done(self, result: int) -> None:
        self.process.cancel()
        super().done(result)
