"""A run this studio starts on this machine: the trainer in a TrainerProcess, as a RunSource."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject

from studio.core.runs.records.run_model import EventTail, RunModel
from studio.gui.runner.process import Outcome
from studio.gui.runner.source import RunSource
from studio.gui.runner.trainer_process import TrainerProcess


class LocalRun(RunSource):
    def __init__(self, run_dir: Path, command: list[str], env: dict[str, str] | None = None, resumed: bool = False,
                 use_launcher: bool = True, parent: QObject | None = None) -> None:
        super().__init__(run_dir, parent)
        self.command, self.env, self.resumed = command, env, resumed
        self.process = TrainerProcess(self, use_launcher=use_launcher)
        self.process.sig_started.connect(self._started)
        self.process.sig_finished.connect(self._finished)
        self.process.sig_error.connect(self.sig_error)
        self.process.sig_output.connect(self.sig_output)
        self.process.sig_progress.connect(self.sig_progress)

    def catch_up(self, model: RunModel, tail: EventTail) -> None:
        if self.resumed:  # a resumed run continues its curves, not the error it stopped on
            model.apply_all(tail.finish_items())
            # A leg killed without a word ended at its last event: the time since is no training time.
            model.mark_ended("failed", "")
            model.status, model.finished, model.errors, model.message = "preparing", None, [], ""

    def start(self) -> bool:
        return self.process.start_run(self.command, self.run_dir, env=self.env)

    def _started(self) -> None:
        self.sig_output.emit(f"[studio] trainer started (pid {self.process.pid()})")
        self.sig_started.emit()

    def _finished(self, outcome: Outcome) -> None:
        self.killed = self.process.killed
        self.sig_ended.emit(outcome)

    def is_running(self) -> bool:
        return self.process.is_running()

    def pid(self) -> int:
        return self.process.pid()

    def stop(self) -> bool:
        return self.process.stop()

    def kill(self) -> None:
        self.process.kill()

    def kill_now(self, timeout_s: float = 5.0) -> None:
        self.process.kill_now(timeout_s)

    def detach(self) -> None:
        self.process.detach()
