"""A run on a cloud cluster (SkyPilot), followed like any other run, that ends with the cluster going down.

Its events and console arrive as an SSH run's do: mirrors of the files there, through the launcher's
shell command (core/cloud/run). The launcher's job status, asked on a Worker every few seconds
(SkyPilot's answers take a while), says when the run has ended; then the run folder is brought back
into the local one and the cluster is torn down (left up when the copy fails: its files are the
run), before the controller hears of the end. Stop asks the
trainer to stop (it saves a checkpoint), which ends the job the same way; Kill brings back what is there
and ends the cluster at once. Letting go (the studio closing with "keep running") leaves the cluster to
its autostop.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QTimer

from studio.core.app_words import cli_command
from studio.core.cloud.api import CloudApi, CloudError, ClusterState
from studio.core.cloud.run import (
    BroughtBack,
    CloudRunRecord,
    NothingToBringBack,
    bring_back,
    end_cluster,
    follow_cloud_files,
    job_exit_code,
    pull_command,
    request_cloud_stop,
)
from studio.core.protocol.tail import ConsoleTail
from studio.core.runs.folders import CONSOLE_FILE
from studio.gui.runner.process import Outcome
from studio.gui.runner.source import RunSource
from studio.gui.runner.worker import Worker

EXPECTED = (CloudError, OSError)
STATE_MS = 5000  # how often the launcher is asked about the job


def _bring_back_and_down(api: CloudApi, record: CloudRunRecord, local_dir: Path,
                         state: ClusterState | None) -> tuple[int | None, BroughtBack | None, str, bool]:
    """(the run's exit code, what came back, why nothing came back, whether the cluster is down).

    The cluster goes down once its run is here, or when it holds none. When the copy itself failed (the
    network, the local disk) it is left up: its files are the hours of training the person paid for, and
    ending it would delete them; its autostop still ends it, and the message says how to bring them back."""
    brought, why = None, ""
    if state is None or state.status != "gone":
        try:
            brought = bring_back(api, record, local_dir)
        except NothingToBringBack as exc:
            why = str(exc)
        except (CloudError, OSError) as exc:
            return (job_exit_code(state) if state is not None else None), None, str(exc), False
    else:
        why = f"{record.cluster} was gone already (its autostop ended it)"
    end_cluster(api, record, local_dir)
    return (job_exit_code(state) if state is not None else None), brought, why, True


class CloudRun(RunSource):
    says_outcome = False  # console.log is the cluster's, byte for byte

    def __init__(self, local_dir: Path, record: CloudRunRecord, api: CloudApi, parent: QObject | None = None,
                 poll_ms: int = 200, state_ms: int = STATE_MS) -> None:
        super().__init__(local_dir, parent)
        self.record, self.api = record, api
        self.mirrors = follow_cloud_files(api, record.cluster, local_dir)
        self.worker = Worker(self)
        self.stop_requested = False
        self.brought: BroughtBack | None = None
        self.down = False
        self._running = False
        self._ending = False
        self._asking = False
        console = local_dir / CONSOLE_FILE
        self._console = ConsoleTail(console, offset=console.stat().st_size if console.exists() else 0)
        self._timer = QTimer(self)
        self._timer.setInterval(poll_ms)
        self._timer.timeout.connect(self._poll)
        self._state_timer = QTimer(self)
        self._state_timer.setInterval(state_ms)
        self._state_timer.timeout.connect(self._ask_state)

    # ------------------------------------------------------------ what the controller asks
    def is_running(self) -> bool:
        return self._running

    def busy_message(self) -> str:
        return (f"A training is running on the cloud cluster {self.record.cluster} ({self.run_dir.name}). "
                "Stop it first, or add this config to the queue.")

    def start(self) -> bool:
        for mirror in self.mirrors.values():
            mirror.start()
        self._running = True
        self._timer.start()
        self._state_timer.start()
        self.sig_output.emit(f"[studio] following the run on the cloud cluster {self.record.cluster} (job "
                             f"{self.record.job}); Stop saves a checkpoint, brings the run back and ends the cluster")
        self.sig_started.emit()
        return True

    def stop(self) -> bool:
        if not self._running or self._ending:
            return False
        self.stop_requested = True
        self.worker.run(request_cloud_stop, self.api, self.record.cluster, on_done=self._stop_sent,
                        on_failed=self._failed, expected=EXPECTED)
        return True

    def _stop_sent(self, delivered: bool) -> None:
        if delivered:
            self.sig_output.emit(f"[studio] asked the run on {self.record.cluster} to stop; it saves a checkpoint, "
                                 "then it is brought back and the cluster goes down")
        else:  # still being set up: nothing to save, nothing to wait for
            self.sig_output.emit(f"[studio] {self.record.cluster} has not started training yet; ending it")
            self._end(None)

    def kill(self) -> None:
        if not self._running or self._ending:
            return
        self.killed = True
        self.sig_output.emit(f"[studio] ending {self.record.cluster} now (what the run wrote so far is brought back)")
        self._end(ClusterState(self.record.cluster, "UP", "CANCELLED"))

    def kill_now(self, timeout_s: float = 60.0) -> None:
        """Blocking: bring back what is there and end the cluster (the window is closing)."""
        if not self._running:
            return
        self.killed = True
        self._close_streams()
        self.worker.wait(timeout_s)
        self._brought_back(_bring_back_and_down(self.api, self.record, self.run_dir,
                                                ClusterState(self.record.cluster, "UP", "CANCELLED")))

    def detach(self) -> None:
        """Stop following; the cluster goes on and ends itself by its autostop after the run."""
        if self._running:
            self.sig_output.emit(f"[studio] stopped following; {self.record.cluster} goes on and ends itself after "
                                 f"the run; bring the run back before that with: {pull_command(self.record)}")
            self._finish(0, "detached")

    def close_question(self) -> str:
        return (f"A training is running on the cloud cluster {self.record.cluster}. Stop it (a checkpoint is saved, "
                "the run is brought back into this project and the cluster is ended), or keep it running without "
                "the studio? The cluster then ends itself after the run, and the run's files go with it unless "
                f"you bring them back first ({pull_command(self.record)}).")

    def unfinished(self, outcome: Outcome) -> str:
        if self.killed and self.down:
            return (f"Killed on request; {self.record.cluster} was ended, and what the run had written "
                    "by then was brought back.")
        if self.killed:
            return f"Killed on request; {self.record.cluster} is left up: its files did not come back (above)."
        return (f"The run on {self.record.cluster} ended without saying it finished (job "
                f"{self.record.job_status or 'status unknown'}); its console.log shows its last words.")

    # ------------------------------------------------------------ following
    def _poll(self) -> None:
        for mirror in self.mirrors.values():
            while mirror.stream.notices:
                self.sig_output.emit(f"[studio] {mirror.stream.notices.popleft()}")
        self._show_console()

    def _show_console(self) -> None:
        text = self._console.pump()
        for line in text.lines:
            self.sig_output.emit(line)
        if text.progress:
            self.sig_progress.emit(text.progress)

    def _ask_state(self) -> None:
        if self._asking or self._ending:
            return
        self._asking = True
        self.worker.run(self.api.state, self.record.cluster, on_done=self._state, on_failed=self._state_failed,
                        expected=EXPECTED)

    def _state(self, state: ClusterState) -> None:
        self._asking = False
        if state.running or self._ending:
            return
        self.sig_output.emit(f"[studio] the run ended on {self.record.cluster} (cluster {state.status}, job "
                             f"{state.job or '?'}); bringing it back, then ending the cluster")
        self._end(state)

    def _state_failed(self, error: BaseException) -> None:
        self._asking = False  # asked again at the next tick; SkyPilot's API server may be restarting
        self.sig_output.emit(f"[studio] could not read the state of {self.record.cluster}: {error}")

    def _end(self, state: ClusterState | None) -> None:
        if self._ending:
            return
        self._ending = True
        self._state_timer.stop()
        self.record.job_status = (state.job or "") if state is not None else ""
        self._close_streams()
        self._show_console()
        self.worker.run(_bring_back_and_down, self.api, self.record, self.run_dir, state,
                        on_done=self._brought_back, on_failed=self._not_down, expected=EXPECTED)

    def _brought_back(self, result: tuple[int | None, BroughtBack | None, str, bool]) -> None:
        code, self.brought, why, self.down = result
        self._show_console()  # the console's last lines came with the run folder
        if self.brought is not None:
            self.sig_output.emit(f"[studio] {self.brought.files} file(s) of {self.brought.remote_run} brought back "
                                 f"from {self.record.cluster}")
        elif not self.down:
            self.sig_error.emit(
                f"The run's files did not come back from {self.record.cluster}: {why}. The cluster is left up so "
                f"they are not lost (it still ends itself after its autostop's idle minutes, and they go with it): "
                f"bring them back with: {pull_command(self.record)} and then end it with: "
                f"{cli_command(['cloud', 'down', self.record.cluster])}")
        else:
            self.sig_error.emit(f"The run's files did not come back from {self.record.cluster}: {why}")
        if self.down:
            self.sig_output.emit(f"[studio] {self.record.cluster} is down; its billing has stopped")
        self._finish(137 if self.killed or code is None else code, "crashed" if code is None else "normal")

    def _not_down(self, error: BaseException) -> None:
        self.sig_error.emit(f"{self.record.cluster} may still be running and costing money: ending it failed "
                            f"({error}); end it with: {cli_command(['cloud', 'down', self.record.cluster])}")
        self._finish(1, "crashed")

    def _failed(self, error: BaseException) -> None:
        self.sig_error.emit(str(error))

    def _finish(self, code: int, how: str) -> None:
        self._timer.stop()
        self._state_timer.stop()
        self._close_streams()
        self._running = False
        self.sig_ended.emit(Outcome(code, how))

    def _close_streams(self) -> None:
        for mirror in self.mirrors.values():
            mirror.close()

    def release(self) -> None:
        self._timer.stop()
        self._state_timer.stop()
        self._close_streams()
        self.worker.wait(60.0)
        super().release()

