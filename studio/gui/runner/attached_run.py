"""A training left running by an earlier session of the studio, followed again after a restart.

The studio did not start this process, so it has no QProcess for it: its console is read from
the run folder's console.log (the protocol's ConsoleTail), its end is noticed by polling the
process, and Stop and Kill go through the STOP file and the process tree, as they would for a
run the studio started.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer

from studio.core.protocol.tail import ConsoleTail, ConsoleText
from studio.core.runs.ending import end_tree
from studio.core.runs.folders import CONSOLE_FILE
from studio.core.runs.live import LiveRun, is_alive, stop_live_run, trainer_process
from studio.core.runs.records.run_model import EventTail, RunModel
from studio.gui.runner.process import Outcome
from studio.gui.runner.source import KILLED, RunSource

CONSOLE_TAIL_BYTES = 64 * 1024  # what the console pane shows of the time before the studio came back
KILL_GRACE_MS = 2000


class AttachedRun(RunSource):
    owned = False  # no exit code reaches this studio
    says_outcome = False

    def __init__(self, run: LiveRun, parent: QObject | None = None, poll_ms: int = 300) -> None:
        super().__init__(run.run_dir, parent)
        self.run = run
        self.console_path = run.run_dir / CONSOLE_FILE
        try:
            offset = max(0, self.console_path.stat().st_size - CONSOLE_TAIL_BYTES)
        except OSError:
            offset = 0
        self._console = ConsoleTail(self.console_path, offset=offset)
        self._timer = QTimer(self)
        self._timer.setInterval(poll_ms)
        self._timer.timeout.connect(self.poll)

    def catch_up(self, model: RunModel, tail: EventTail) -> None:
        # Complete lines only: the trainer goes on writing, and a line it is writing now is read whole by the
        # next poll (read as the end of a file, its first half and its rest were two garbage lines, the event lost).
        model.apply_all(tail.poll_items())
        while tail.has_more() and not tail.restarted:
            model.apply_all(tail.poll_items())

    def start(self) -> bool:
        self._timer.start()
        self.sig_output.emit(f"[studio] following the training left running in {self.run_dir} "
                             f"(process {self.run.pid}); Stop and Kill work as for any run")
        self.sig_started.emit()
        return True

    def is_running(self) -> bool:
        return self._timer.isActive()

    def busy_message(self) -> str:
        return (f"A training is already running ({self.run_dir.name}, started before the studio "
                "was last closed). Stop it first, or add this config to the queue.")

    def poll(self) -> None:
        self._show(self._console.pump())
        if not is_alive(self.run):
            self._timer.stop()
            self._show(self._console.finish())
            self.sig_ended.emit(Outcome(-1, "normal"))

    def _show(self, text: ConsoleText) -> None:
        if text.lines:
            self.sig_output.emit("\n".join(text.lines))
        if text.progress:
            self.sig_progress.emit(text.progress)

    def unfinished(self, outcome: Outcome) -> str:
        if self.killed:
            return KILLED
        return "The trainer ended without saying it finished; its console.log in the run folder shows its last words."

    def stop(self) -> bool:
        """Ask the trainer to stop at its next step (a checkpoint is saved; it can be resumed)."""
        stop_live_run(self.run)
        return True

    def kill(self) -> None:
        """End the trainer's whole process tree: terminate now, kill what is left a moment later."""
        self.killed = True
        tree = end_tree(trainer_process(self.run))
        QTimer.singleShot(KILL_GRACE_MS, tree.kill)

    def kill_now(self, timeout_s: float = 5.0) -> None:
        """Blocking kill (the studio closing with "stop" and a trainer that did not stop in time)."""
        self.killed = True
        end_tree(trainer_process(self.run)).kill_after(timeout_s)
        self.poll()

    def detach(self) -> None:
        """Stop following; the trainer goes on (the studio closes again with the run still going)."""
        if self._timer.isActive():
            self._timer.stop()
            self.sig_ended.emit(Outcome(0, "detached"))
