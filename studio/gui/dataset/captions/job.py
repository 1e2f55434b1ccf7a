"""A captioning job for the Dataset page: `studio-train caption --json --dry-run` in its own process.

The model (torch, transformers or onnxruntime) loads in that process, never in the window;
it writes nothing, and prints one JSON line per event, which arrive here as signals. What is
written is decided in the review, through the page's caption store and undo stack.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QProcess, QTimer, Signal

from studio.core.dataset.auto_caption import (
    EVENT_CAPTION,
    EVENT_FINISHED,
    EVENT_PROGRESS,
    EVENT_STARTED,
    EVENT_WARNING,
    MachineCaption,
    Mode,
)
from studio.core.studio_command import studio_command
from studio.core.user_dirs import cache_dir

STOP_GRACE_MS = 5000  # after asking the job to stop, how long it may finish its batch before it is killed
_STDERR_KEPT = 4000  # characters of the job's stderr kept to explain a failure


def caption_command(python: str | None, dataset: Path, model: str, mode: Mode, images_file: Path) -> list[str]:
    """The command that proposes captions for the images listed in `images_file`, writing nothing."""
    return studio_command(["caption", str(dataset), "--model", model, "--mode", mode,
                           "--images-from", str(images_file), "--json", "--dry-run"], python=python)


class CaptionJob(QObject):
    """One captioning process at a time; its JSON lines become the signals below."""

    sig_started = Signal(dict)  # model, kind, device, precision, total, ...
    sig_caption = Signal(object)  # MachineCaption
    sig_progress = Signal(int, int)  # done, total
    sig_warning = Signal(str)
    sig_finished = Signal(str, str)  # status (completed | stopped | failed), message

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._process: QProcess | None = None
        self._buffer = b""
        self._stderr = ""
        self._list_file: Path | None = None
        self._finished_event: dict[str, Any] | None = None
        self._stopping = False
        self._kill_timer = QTimer(self, singleShot=True, interval=STOP_GRACE_MS)
        self._kill_timer.timeout.connect(self._kill)

    @property
    def running(self) -> bool:
        return self._process is not None

    def start(self, python: str, dataset: Path, model: str, mode: Mode, images: Sequence[Path]) -> None:
        """Caption `images` of the dataset at `dataset` (an image folder or a project folder)."""
        if self._process is not None:
            raise RuntimeError("a captioning job is already running")
        folder = cache_dir() / "caption-jobs"
        folder.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix="images-", suffix=".txt", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8") as listing:
            listing.write("".join(f"{image}\n" for image in images))
        self._list_file = Path(name)
        self._buffer, self._stderr, self._finished_event, self._stopping = b"", "", None, False
        command = caption_command(python, dataset, model, mode, self._list_file)
        process = QProcess(self)
        process.setProgram(command[0])
        process.setArguments(command[1:])
        process.readyReadStandardOutput.connect(self._read_stdout)
        process.readyReadStandardError.connect(self._read_stderr)
        process.finished.connect(self._on_finished)
        process.errorOccurred.connect(self._on_error)
        self._process = process
        process.start()

    def stop(self) -> None:
        """Ask the job to stop after its batch (the proposals so far stay); killed if it does not."""
        if self._process is None or self._stopping:
            return
        self._stopping = True
        self._process.terminate()
        self._kill_timer.start()

    def kill_now(self) -> None:
        """End the job and wait for it (closing the dialog or the window)."""
        process = self._process
        if process is None:
            return
        process.kill()
        process.waitForFinished(5000)

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    def _read_stdout(self) -> None:
        if self._process is None:
            return
        self._buffer += bytes(self._process.readAllStandardOutput().data())
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._handle_line(line.decode("utf-8", errors="replace"))

    def _read_stderr(self) -> None:
        if self._process is not None:
            text = bytes(self._process.readAllStandardError().data()).decode("utf-8", errors="replace")
            self._stderr = (self._stderr + text)[-_STDERR_KEPT:]

    def _handle_line(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return  # a library printing on stdout; the job's own lines are JSON
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == EVENT_STARTED:
            self.sig_started.emit(event)
        elif kind == EVENT_CAPTION:
            self.sig_caption.emit(MachineCaption.from_json(event))
        elif kind == EVENT_PROGRESS:
            self.sig_progress.emit(int(event["done"]), int(event["total"]))
        elif kind == EVENT_WARNING:
            self.sig_warning.emit(str(event.get("message", "")))
        elif kind == EVENT_FINISHED:
            self._finished_event = event

    def _on_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self._process is not None:
            program = self._process.program()
            self._done("failed", f"Could not start {program}: {self._process.errorString()}. "
                                 "Check launch.python in the project's settings (the training environment).")

    def _on_finished(self, exit_code: int, _status: QProcess.ExitStatus) -> None:
        if self._process is None:
            return
        self._read_stdout()
        self._read_stderr()
        if self._buffer:
            self._handle_line(self._buffer.decode("utf-8", errors="replace"))
        event = self._finished_event
        if event is not None and event.get("status") in ("completed", "stopped", "failed"):
            self._done(str(event["status"]), str(event.get("message", "")))
        elif self._stopping:
            self._done("stopped", "")
        else:
            tail = self._stderr.strip().splitlines()[-1:] or [f"exit code {exit_code}"]
            self._done("failed", f"The captioning process ended unexpectedly: {tail[0]}")

    def _done(self, status: str, message: str) -> None:
        self._kill_timer.stop()
        process, self._process = self._process, None
        if process is not None:
            process.deleteLater()
        if self._list_file is not None:
            with contextlib.suppress(OSError):
                self._list_file.unlink()
            self._list_file = None
        if status == "failed" and not message:
            message = self._stderr.strip().splitlines()[-1] if self._stderr.strip() else "the captioner failed"
        self.sig_finished.emit(status, message)
