"""A training left running by an earlier session of the studio, followed again after a restart.

The studio did not start this process, so it has no QProcess for it: its console is read from
the run folder's console.log, its end is noticed by polling the process, and Stop and Kill go
through the STOP file and the process tree, as they would for a run the studio started.
"""

from __future__ import annotations

import codecs
import contextlib

import psutil
from PySide6.QtCore import QObject, QTimer, Signal

from studio.core.runs.folders import CONSOLE_FILE
from studio.core.runs.live import LiveRun, end_processes, is_alive, stop_live_run, trainer_tree
from studio.gui.runner.process import console_text

CONSOLE_TAIL_BYTES = 64 * 1024  # what the console pane shows of the time before the studio came back
KILL_GRACE_MS = 2000


class AttachedRun(QObject):
    sig_output = Signal(str)  # finished console lines
    sig_progress = Signal(str)  # the line a progress bar is redrawing
    sig_ended = Signal()  # the trainer is gone (it finished, failed, or was stopped or killed)

    def __init__(self, run: LiveRun, parent: QObject | None = None, poll_ms: int = 300) -> None:
        super().__init__(parent)
        self.run = run
        self.killed = False
        self.console_path = run.run_dir / CONSOLE_FILE
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._rest = ""
        try:
            self._offset = max(0, self.console_path.stat().st_size - CONSOLE_TAIL_BYTES)
        except OSError:
            self._offset = 0
        self._timer = QTimer(self)
        self._timer.setInterval(poll_ms)
        self._timer.timeout.connect(self.poll)
        self._timer.start()

    @property
    def active(self) -> bool:
        return self._timer.isActive()

    def poll(self) -> None:
        self._read_console()
        if not is_alive(self.run):
            self._timer.stop()
            self._read_console()
            if self._rest:
                self.sig_output.emit(self._rest.rsplit("\r", 1)[-1])
                self._rest = ""
            self.sig_ended.emit()

    def _read_console(self) -> None:
        try:
            with open(self.console_path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(1 << 20)
        except OSError:
            return
        if not data:
            return
        self._offset += len(data)
        lines, self._rest = console_text(self._rest + self._decoder.decode(data))
        if lines:
            self.sig_output.emit("\n".join(lines))
        if self._rest:
            self.sig_progress.emit(self._rest.rsplit("\r", 1)[-1])

    def stop(self) -> bool:
        """Ask the trainer to stop at its next step (a checkpoint is saved; it can be resumed)."""
        stop_live_run(self.run)
        return True

    def kill(self) -> None:
        """End the trainer's whole process tree: terminate now, kill what is left a moment later."""
        self.killed = True
        procs = trainer_tree(self.run)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()

        def finish() -> None:
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    if proc.is_running():
                        proc.kill()

        QTimer.singleShot(KILL_GRACE_MS, finish)

    def kill_now(self, timeout_s: float = 5.0) -> None:
        """Blocking kill (the studio closing with "stop" and a trainer that did not stop in time)."""
        self.killed = True
        end_processes(trainer_tree(self.run), timeout_s)

    def release(self) -> None:
        """Stop following; the trainer goes on (the studio closes again with the run still going)."""
        self._timer.stop()
