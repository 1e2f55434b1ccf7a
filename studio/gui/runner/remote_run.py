"""A run on a remote machine, followed the way the RunController follows a local trainer.

`RemoteRun` is a RunSource like a local run (signals, stop, kill, detach), so the
Train and Runs pages show a remote run with the same plots and buttons. Its events and
console arrive through SSH tails into the run's local folder (core/remote/control),
the remote GPUs' memory through nvidia-smi; blocking SSH calls (stop, kill, bringing the
run back) run on a Worker. A run that ends is brought back (checkpoints stay there) before
the controller hears of it.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer

from studio.core.protocol.tail import ConsoleTail
from studio.core.remote.control import (
    RemoteRunRecord,
    client_for,
    follow_files,
    kill_remote_run,
    mark_ended,
    pull_run,
    read_record,
    remote_state,
    request_remote_stop,
)
from studio.core.remote.gpu import RemoteGpuMonitor
from studio.core.remote.machines import MachineError
from studio.core.remote.ssh import RemoteError, SshClient
from studio.core.remote.transfer import TransferReport
from studio.core.runs.folders import CONSOLE_FILE, EVENTS_FILE
from studio.gui.runner.gpu_memory import GpuMemorySampler
from studio.gui.runner.process import Outcome
from studio.gui.runner.remote_gpu import RemoteGpuSampler
from studio.gui.runner.source import RunSource
from studio.gui.runner.worker import Worker

EXPECTED = (RemoteError, MachineError, OSError)
CONSOLE_GRACE_S = 10.0


class RemoteRun(RunSource):
    """Ends with launch.sh's exit status: Outcome(status, "normal" | "crashed" | "detached")."""

    says_outcome = False

    def __init__(self, local_dir: Path, record: RemoteRunRecord | None = None, client: SshClient | None = None,
                 parent: QObject | None = None, poll_ms: int = 200) -> None:
        """Raises RemoteError or MachineError when the run's record or machine cannot be read."""
        super().__init__(local_dir, parent)
        self.record = record or read_record(local_dir)
        self.client = client or client_for(self.record)
        self.stop_requested = False
        self.pulled: TransferReport | None = None
        self.mirrors = follow_files(self.client, self.record, local_dir)
        self.gpu = RemoteGpuMonitor(self.client)
        # No parent: the Train page's plots keep drawing from it after this run object is gone.
        self._gpu_sampler = RemoteGpuSampler(self.record.machine)
        self.worker = Worker(self)
        self._running = False
        self._ending = False
        self._told_no_gpu = False
        self._announced = False
        self._ended_at = 0.0
        self._no_status = False  # it ended there without launch.sh's exit status
        console = local_dir / CONSOLE_FILE
        self._console = ConsoleTail(console, offset=console.stat().st_size if console.exists() else 0)
        self._timer = QTimer(self)
        self._timer.setInterval(poll_ms)
        self._timer.timeout.connect(self._poll)

    # ------------------------------------------------------------ what the controller asks
    def is_running(self) -> bool:
        return self._running

    def pid(self) -> int:
        return self.record.pid

    def gpu_sampler(self) -> GpuMemorySampler | None:
        return self._gpu_sampler

    def busy_message(self) -> str:
        return (f"A training is running on {self.record.machine} ({self.run_dir.name}). "
                "Stop it first, or add this config to the queue.")

    def start(self) -> bool:
        for mirror in self.mirrors.values():
            mirror.start()
        self.gpu.start()
        self._running = True
        self._timer.start()
        self.sig_started.emit()
        return True

    def stop(self) -> bool:
        """Write the STOP file there; the trainer saves a checkpoint at its next step and ends."""
        if not self._running:
            return False
        self.stop_requested = True
        self.worker.run(request_remote_stop, self.client, self.record, on_done=lambda _r: self.sig_output.emit(
            f"[studio] asked the run on {self.record.machine} to stop"), on_failed=self._failed, expected=EXPECTED)
        return True

    def kill(self) -> None:
        if not self._running or self._ending:  # ended there: only its files are still coming
            return
        self.killed = True
        self.worker.run(kill_remote_run, self.client, self.record, on_done=lambda count: self.sig_output.emit(
            f"[studio] ended {count} process(es) on {self.record.machine}"), on_failed=self._failed,
            expected=EXPECTED)

    def kill_now(self, timeout_s: float = 30.0) -> None:
        """Blocking: end the run there, stop following (the window is closing)."""
        if not self._running:
            return
        self.killed = True
        try:
            kill_remote_run(self.client, self.record, grace_s=min(10.0, timeout_s))
        except EXPECTED as exc:
            self.sig_error.emit(f"Could not end the run on {self.record.machine}: {exc}")
        self._finish(137, "crashed")

    def detach(self) -> None:
        """Stop following; the run goes on there and can be followed again from the Runs page."""
        if self._running:
            self.sig_output.emit(f"[studio] stopped following; the run goes on on {self.record.machine}")
            self._finish(0, "detached")

    # ------------------------------------------------------------ following
    def _poll(self) -> None:
        if not self._announced:  # on the first tick: the Train page clears its console when the run starts
            self._announced = True
            self.sig_output.emit(f"[studio] following {self.record.remote_run_dir} on {self.record.machine} "
                                 f"({self.record.target}); it goes on if the studio closes")
        for mirror in self.mirrors.values():
            while mirror.stream.notices:
                self.sig_output.emit(f"[studio] {mirror.stream.notices.popleft()}")
        self._show_console()
        self._gpu_sampler.feed(self.gpu.drain())
        if self.gpu.unavailable and not self._told_no_gpu:
            self._told_no_gpu = True
            self._gpu_sampler.unavailable = self.gpu.unavailable
            self.sig_output.emit(f"[studio] {self.gpu.unavailable}; memory comes from the trainer's events")
        if self.mirrors[EVENTS_FILE].ended and not self._ending:
            # The console's tail ends at the same moment; it gets a few seconds, the window never waits.
            self._ended_at = self._ended_at or time.monotonic()
            if not self.mirrors[CONSOLE_FILE].ended and time.monotonic() - self._ended_at < CONSOLE_GRACE_S:
                return
            self._ending = True
            self._show_console()
            self.sig_output.emit(f"[studio] the run ended on {self.record.machine}; bringing it back")
            self.worker.run(self._bring_back, on_done=self._brought_back, on_failed=self._not_brought_back,
                            expected=EXPECTED)

    def _show_console(self) -> None:
        text = self._console.pump()
        for line in text.lines:
            self.sig_output.emit(line)
        if text.progress:
            self.sig_progress.emit(text.progress)

    def _bring_back(self) -> tuple[int | None, TransferReport]:
        state = remote_state(self.client, self.record)
        mark_ended(self.run_dir, self.record, state[1])
        report = pull_run(self.client, self.record, self.run_dir, mirrored=(EVENTS_FILE, CONSOLE_FILE), state=state)
        status = state[1]
        return status, report

    def _brought_back(self, result: tuple[int | None, TransferReport]) -> None:
        status, self.pulled = result
        self._no_status = status is None
        self.sig_output.emit(f"[studio] {len(self.pulled.copied)} file(s) brought back from {self.record.machine}")
        self._finish(status if status is not None else 137, "normal" if status is not None else "crashed")

    def _not_brought_back(self, error: BaseException) -> None:
        self.sig_error.emit(f"The run ended on {self.record.machine} but its files did not come back ({error}); "
                            "bring them back later: Runs page, Bring back")
        self._finish(0, "normal")

    def unfinished(self, outcome: Outcome) -> str:
        if self._no_status and not self.killed:
            # launch.sh writes its status when it ends: without one it was ended from outside.
            machine = self.record.machine
            return (f"The run on {machine} ended without an exit status: it was ended there from outside the "
                    f"studio, or {machine} restarted; the console shows its last words.")
        return super().unfinished(outcome)

    def _failed(self, error: BaseException) -> None:
        self.sig_error.emit(str(error))

    def _finish(self, code: int, how: str) -> None:
        self._timer.stop()
        self._close_streams()
        self.client.close()
        self._running = False
        self.sig_ended.emit(Outcome(code, how))

    def _close_streams(self) -> None:
        for mirror in self.mirrors.values():
            mirror.close()
        self.gpu.close()

    def release(self) -> None:
        """Leave nothing running here (the run there is not touched)."""
        self._timer.stop()
        self._close_streams()
        self.worker.wait(60.0)
        self.client.close()
        super().release()
