"""What the RunController follows: one face for a local, remote, re-attached or replayed run.

A `RunSource` starts (or finds) a run, says what it prints (`sig_output`, `sig_progress`),
can be asked to stop, be killed or be let go (`detach`), and ends once with an `Outcome`
(`sig_ended`). The controller tails the run folder's events.jsonl the same way whatever
the source, and never asks which kind it holds.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from studio.core.runs.records.run_model import EventTail, RunModel
from studio.gui.runner.gpu_memory import GpuMemorySampler
from studio.gui.runner.process import Outcome

KILLED = "Killed on request; the run can be resumed from its last checkpoint."


class RunSource(QObject):
    sig_started = Signal()
    sig_output = Signal(str)  # finished console lines, and the studio's own notes
    sig_progress = Signal(str)  # the line a progress bar is redrawing
    sig_error = Signal(str)  # a refusal or an error for the person
    sig_ended = Signal(object)  # Outcome: once, however the run ended
    sig_model = Signal(object)  # a RunModel read on a worker (a replay) that replaces the controller's

    # Its events file grows while it runs: the controller tails it. False for a replay.
    live = True
    # The studio started this run and hears its exit code: the queue goes on after it.
    owned = True
    # Its console.log is this studio's to end with the one-line account of the run (a remote run's
    # is a mirror of the file there, and stays byte for byte).
    says_outcome = True

    def __init__(self, run_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.run_dir = run_dir
        self.killed = False

    # ------------------------------------------------------------ what every source does
    def catch_up(self, model: RunModel, tail: EventTail) -> None:
        """Before the start: read into `model` what the events file already holds (a resumed run, a run
        left running). Nothing by default: a new run's file is empty."""

    def start(self) -> bool:
        raise NotImplementedError

    def is_running(self) -> bool:
        raise NotImplementedError

    def stop(self) -> bool:
        """Ask the run to stop at its next step (it saves a checkpoint and says run_finished)."""
        raise NotImplementedError

    def kill(self) -> None:
        """End the run now (its whole process tree)."""
        raise NotImplementedError

    def kill_now(self, timeout_s: float = 5.0) -> None:
        """Blocking kill (the window is closing)."""
        raise NotImplementedError

    def detach(self) -> None:
        """Stop following; the run goes on without the studio (ends with Outcome(0, "detached"))."""
        raise NotImplementedError

    def busy_message(self) -> str:
        return (f"A training is already running ({self.run_dir.name}). "
                "Stop it first, or add this config to the queue.")

    def close_question(self) -> str:
        """What the studio asks when it is closed while this run goes on ("Stop training" or "Keep running")."""
        return ("A training is running. Stop it (a checkpoint is saved, the run can be resumed), "
                "or keep it running without the studio? Its progress stays in the run folder and "
                "shows on the Runs page when the studio starts again.")

    def gpu_sampler(self) -> GpuMemorySampler | None:
        """The GPUs the plots show for this run: None for this machine's own."""
        return None

    def unfinished(self, outcome: Outcome) -> str:
        """What the run model says when the run ended without its run_finished event."""
        if self.killed:
            return KILLED
        if outcome.how == "failed to start":
            return "The trainer could not be started; see the console."
        return (f"The trainer exited with code {outcome.code} ({outcome.how}) before it finished; "
                "the console shows its last words.")

    def release(self) -> None:
        """After the end: let go of what it holds (streams, connections)."""
        self.deleteLater()
