"""Downloading a base model from the GUI: `studio-train download ID --json` in a QProcess, shown as a progress bar.

The download runs in its own process (huggingface_hub and the network never touch the
window's process); its JSON lines carry bytes, rate and time left. A gated model asks
for a token, which goes straight to the system keyring.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal
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

from studio.core.models.downloads import DownloadProgress, progress_text
from studio.core.models.hub_token import TokenStoreError, store_token
from studio.core.studio_command import studio_command
from studio.core.training_python import NoTrainingPython


def download_command(repo_id: str, with_t5: bool = False, python: str | None = None) -> list[str]:
    """`studio-train download ID --json` as this app runs it (in the frozen app: the training environment)."""
    return studio_command(["download", repo_id, "--json", *(["--with-t5"] if with_t5 else [])], python=python)


class DownloadProcess(QObject):
    """One `studio-train download` at a time; its JSON lines become signals."""

    sig_progress = Signal(object)  # DownloadProgress
    sig_done = Signal(str)  # the snapshot folder
    sig_failed = Signal(str, bool)  # message, whether a token would help (a gated model)

    def __init__(self, python: str | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.python = python  # None: the training environment's (studio/core/studio_command.py)
        self.program = ""
        self.process: QProcess | None = None
        self._buffer = b""
        self._ended = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.state() != QProcess.ProcessState.NotRunning

    def start(self, repo_id: str, with_t5: bool = False) -> None:
        self.cancel()
        try:
            program, *arguments = download_command(repo_id, with_t5, self.python)
        except NoTrainingPython as exc:  # the frozen app downloads with the training environment's libraries
            self.sig_failed.emit(f"The download cannot start yet: {exc}.", False)
            return
        self.program = program
        process = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONUNBUFFERED", "1")  # each progress line arrives as it is printed
        process.setProcessEnvironment(env)
        process.setProgram(program)
        process.setArguments(arguments)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.SeparateChannels)
        process.readyReadStandardOutput.connect(self._read)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._error)
        self.process, self._buffer, self._ended = process, b"", False
        process.start()

    def cancel(self) -> None:
        """End a running download; what it fetched stays and the next one resumes from there."""
        if self.process is not None and self.running:
            self._ended = True
            self.process.kill()
            self.process.waitForFinished(3000)

    def _read(self) -> None:
        assert self.process is not None
        self._buffer += bytes(self.process.readAllStandardOutput().data())
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                message: dict[str, Any] = json.loads(line)
            except ValueError:
                continue  # not one of the command's lines (a library printed something)
            self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.pop("type", "")
        if kind == "progress":
            progress = DownloadProgress(message["repo_id"])
            for key in ("file", "files_done", "files_total", "done_bytes", "total_bytes", "rate_bps", "phase"):
                setattr(progress, key, message[key])
            self.sig_progress.emit(progress)
        elif kind == "done":
            self._ended = True
            self.sig_done.emit(str(message["path"]))
        elif kind == "error":
            self._ended = True
            self.sig_failed.emit(str(message["message"]), bool(message.get("gated")))

    def _finished(self, code: int, _status: QProcess.ExitStatus) -> None:
        self._read()
        if not self._ended:
            self._ended = True
            error = bytes(self.process.readAllStandardError().data()).decode(errors="replace") if self.process else ""
            tail = error.strip().splitlines()[-1] if error.strip() else "no message"
            self.sig_failed.emit(f"The download ended (exit code {code}): {tail}", False)

    def _error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and not self._ended:
            self._ended = True
            self.sig_failed.emit(f"The download could not start: {self.program} was not found.", False)


class DownloadDialog(QDialog):
    """A progress bar with bytes, rate and time left; Cancel keeps what was fetched for the next try."""

    sig_done = Signal(str, str)  # hub id, snapshot folder

    def __init__(self, repo_id: str, with_t5: bool = False, python: str | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("download_dialog")
        self.setWindowTitle(f"Downloading {repo_id}")
        self.repo_id, self.with_t5 = repo_id, with_t5
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
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"<b>{repo_id}</b>: only the files training needs"))
        layout.addWidget(self.bar)
        layout.addWidget(self.label)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        self.resize(560, 150)
        self.process = DownloadProcess(python, self)
        self.process.sig_progress.connect(self._progress)
        self.process.sig_done.connect(self._done)
        self.process.sig_failed.connect(self._failed)

    def start(self) -> None:
        self.error = None
        self.process.start(self.repo_id, self.with_t5)

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
        self.label.setText(message)
        self.cancel_button.setText("Close")
        if gated and self.ask_token():
            self.start()

    def ask_token(self) -> bool:
        """Ask for a Hugging Face token and keep it in the system keyring; False when none was given."""
        token, ok = QInputDialog.getText(
            self, "A token is needed",
            f"{self.repo_id} is gated: accept its licence on huggingface.co while signed in, then paste a token "
            "of that account (huggingface.co/settings/tokens). It is kept in the system keyring.",
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
            self.label.setText("Cancelled: what was fetched is kept, and the next download resumes from there.")
            self.cancel_button.setText("Close")
            return
        self.reject()

    def done(self, result: int) -> None:
        self.process.cancel()
        super().done(result)
