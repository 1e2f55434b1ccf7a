"""A finished (or copied-back) run shown again: its events file (and the end of its console.log) read on a
Worker, never on the GUI thread."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject

from studio.core.protocol.tail import ConsoleTail
from studio.core.runs.folders import CONSOLE_FILE
from studio.core.runs.records.history import replay_to_show
from studio.core.runs.records.run_model import Replay
from studio.gui.runner.attached_run import CONSOLE_TAIL_BYTES
from studio.gui.runner.source import RunSource
from studio.gui.runner.worker import Job, Worker


def read_run(run_dir: Path) -> tuple[Replay, list[str]]:
    """The run's events, and the last lines of its console.log: the lines its error banner's "Show in console"
    finds (none where it has no console.log)."""
    replay = replay_to_show(run_dir)
    console = run_dir / CONSOLE_FILE
    try:
        offset = max(0, console.stat().st_size - CONSOLE_TAIL_BYTES)
    except OSError:
        return replay, []
    return replay, ConsoleTail(console, offset=offset).finish().lines


class ReplayRun(RunSource):
    """Reads the run on `worker`; `sig_model` hands the model over, `replay` keeps the reader's counts."""

    live = False  # nothing runs: its file is read once, whole
    owned = False
    says_outcome = False

    def __init__(self, run_dir: Path, worker: Worker, parent: QObject | None = None) -> None:
        super().__init__(run_dir, parent)
        self.worker = worker
        self.replay: Replay | None = None
        self.error: BaseException | None = None
        self._job: Job | None = None

    @property
    def loaded(self) -> bool:
        return self.replay is not None or self.error is not None

    def start(self) -> bool:
        self._job = self.worker.run(read_run, self.run_dir, on_done=self._loaded, on_failed=self._failed,
                                    expected=(OSError,))
        return True

    def _loaded(self, result: tuple[Replay, list[str]]) -> None:
        self.replay, console = result
        if console:
            self.sig_output.emit("\n".join(console))
        self.sig_model.emit(self.replay.model)

    def _failed(self, error: BaseException) -> None:
        self.error = error
        self.sig_error.emit(f"Cannot read {self.run_dir.name}: {error}")

    def is_running(self) -> bool:
        return False

    def stop(self) -> bool:
        return False

    def kill(self) -> None:
        pass

    def kill_now(self, timeout_s: float = 5.0) -> None:
        pass

    def detach(self) -> None:
        pass

    def release(self) -> None:
        if self._job is not None:
            self._job.cancel()  # a replay no longer shown: its result is dropped
        super().release()
