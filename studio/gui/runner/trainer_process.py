"""The trainer of one run folder in a `CommandProcess`: its process file, STOP, and "keep running".

The trainer writes `RUN_DIR/console.log` and runs under a tiny launcher that starts it in its
own session: closing the studio with "keep running" ends only the launcher and the training
goes on.
"""

from __future__ import annotations

import logging
from pathlib import Path

import psutil
from PySide6.QtCore import QObject

from studio.core.runs.ending import SESSION_LAUNCHER
from studio.core.runs.folders import CONSOLE_FILE, request_stop
from studio.core.runs.scheduling.lock import write_process_file
from studio.gui.runner.process import CommandProcess, Outcome

log = logging.getLogger(__name__)


class TrainerProcess(CommandProcess):
    """The trainer of one run folder: its process file, the STOP request and "keep running"."""

    def __init__(self, parent: QObject | None = None, poll_ms: int = 200, use_launcher: bool = True) -> None:
        super().__init__(parent, poll_ms)
        self.run_dir: Path | None = None
        self.stop_requested = False
        self._use_launcher = use_launcher

    def start_run(self, command: list[str], run_dir: str | Path, env: dict[str, str] | None = None) -> bool:
        """Start `command` for `run_dir`; refused (False, sig_error) while another run is going."""
        refusal = self.refusal(command)
        if refusal:  # said before anything of the new run is touched
            self.sig_error.emit(refusal)
            return False
        self.run_dir = Path(run_dir)
        self.stop_requested = False
        return self.start(command, self.run_dir / CONSOLE_FILE, cwd=self.run_dir, env=env)

    def program_and_arguments(self, command: list[str]) -> tuple[str, list[str]]:
        if self._use_launcher:
            return command[0], ["-c", SESSION_LAUNCHER, *command]
        return command[0], command[1:]

    def busy_message(self) -> str:
        return (f"A training is already running ({self.run_dir.name if self.run_dir else '?'}). "
                "Stop it first, or add this config to the queue.")

    def start_failure_message(self, reason: str) -> str:
        return (f"Could not start the trainer '{self.command[0]}': {reason}. "
                "Check launch.python in the config (the training environment's Python).")

    def _on_started(self) -> None:
        if self.run_dir is not None and self._process is not None:
            try:
                write_process_file(self.run_dir, int(self._process.processId()))
            except OSError as exc:
                log.warning("cannot write the process file of %s: %s", self.run_dir, exc)
        super()._on_started()

    def stop(self) -> bool:
        """Ask the trainer to stop at its next step (it saves a checkpoint and says run_finished)."""
        if self._process is None or self.run_dir is None:
            return False
        request_stop(self.run_dir)
        self.stop_requested = True
        self._remember_tree()
        return True

    def _hand_over_process_file(self) -> None:
        """Point the run's process file at the trainer itself: the launcher is about to go, and
        the Runs page decides from that file whether the run is still going.

        On Windows the python.exe of a virtual environment (the training environment's) runs the
        launcher in a second process, the base interpreter, which ends with it: the trainer is the
        first process below that runs something other than the launcher."""
        if self.run_dir is None:
            return
        try:
            trainer = psutil.Process(self.pid()).children()[0]
            for _hop in range(3):
                if SESSION_LAUNCHER not in trainer.cmdline():
                    break
                trainer = trainer.children()[0]
            write_process_file(self.run_dir, trainer.pid)
        except (psutil.Error, IndexError, ValueError, OSError) as exc:
            log.warning("cannot record the trainer of %s for after the studio closes: %s", self.run_dir, exc)

    def detach(self) -> None:
        """Let the training go on without the studio: end only the launcher, keep the trainer."""
        proc = self._process
        if proc is None:
            return
        if self._use_launcher:
            self._hand_over_process_file()
            proc.finished.disconnect(self._on_finished)
            proc.errorOccurred.disconnect(self._on_error)
            proc.kill()  # the launcher only; the trainer lives in its own session
            proc.waitForFinished(3000)
        self._append_console("[studio] the studio closed; the training goes on without it\n")
        self._cleanup()
        self.sig_finished.emit(Outcome(0, "detached"))
