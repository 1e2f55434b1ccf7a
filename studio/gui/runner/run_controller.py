"""One run at a time: start, follow its events, stop, kill, resume, and the queue.

The StudioContext owns one RunController and hands it to the Train and Runs pages, so a
second launch from either page is refused with the same message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from studio.core.config.errors import ConfigError
from studio.core.config.schema import TrainConfig
from studio.core.config.toml_file import load_config
from studio.core.project.preflight import preflight_headless
from studio.core.runs import launch
from studio.core.runs.folders import CONFIG_FILE, CONSOLE_FILE, EVENTS_FILE
from studio.core.runs.launch import RunPlan, prepare_run
from studio.core.runs.live import LiveRun, find_live_runs
from studio.core.runs.lock import RunLockedError, lock_holder
from studio.core.runs.outcome import outcome_line
from studio.core.runs.queue import QueueError, RunQueue
from studio.core.runs.run_model import EventTail, Replay, RunModel, replay_run
from studio.core.training_python import NoTrainingPython
from studio.gui.runner.attached_run import AttachedRun
from studio.gui.runner.process import TrainerProcess
from studio.gui.runner.remote_run import RemoteRun
from studio.gui.widgets.gpu_memory import GpuMemorySampler

CommandFactory = Callable[[RunPlan], list[str]]
# One poll reads at most this much of events.jsonl; a backlog is read over several ticks.
POLL_BYTES = 512 * 1024


def default_command(plan: RunPlan) -> list[str]:
    return plan.command


class RunController(QObject):
    sig_run_started = Signal(object)  # Path of the run folder
    sig_tick = Signal()  # the model changed; views redraw (at most redraw_hz a second)
    sig_run_ended = Signal(str)  # the run's final status
    sig_message = Signal(str)  # a refusal or an error for the person
    sig_console = Signal(str)
    sig_progress = Signal(str)
    sig_queue_changed = Signal()

    def __init__(
        self,
        parent: QObject | None = None,
        command_factory: CommandFactory = default_command,
        redraw_hz: float = 20.0,
        finish_grace_ms: int = 30_000,
    ) -> None:
        super().__init__(parent)
        self.command_factory = command_factory
        self.finish_grace_ms = finish_grace_ms
        self.model = RunModel()
        self.tail: EventTail | None = None
        self.queue: RunQueue | None = None
        self._queue_item: str | None = None
        self._stall_kill_armed = False
        self.attached: AttachedRun | None = None  # a run an earlier session left running
        self._trainer = TrainerProcess(self)
        self.process: TrainerProcess | RemoteRun = self._trainer
        self._connect(self._trainer)
        self._timer = QTimer(self)
        self._timer.setInterval(max(50, int(1000 / redraw_hz)))
        self._timer.timeout.connect(self.tick)

    def _connect(self, process: TrainerProcess | RemoteRun) -> None:
        process.sig_started.connect(self._on_started)
        process.sig_finished.connect(self._on_finished)
        process.sig_error.connect(self.sig_message)
        process.sig_output.connect(self.sig_console)
        process.sig_progress.connect(self.sig_progress)

    # ------------------------------------------------------------ state
    @property
    def gpu_sampler(self) -> GpuMemorySampler | None:
        """The GPUs the plots show for the current run: a remote machine's, or None for this one's."""
        return self.process.gpu_sampler if isinstance(self.process, RemoteRun) else None

    @property
    def running(self) -> bool:
        return self.process.is_running() or self.attached is not None

    @property
    def run_dir(self) -> Path | None:
        return self.attached.run.run_dir if self.attached is not None else self.process.run_dir

    def busy_message(self) -> str:
        if self.attached is not None:
            return (f"A training is already running ({self.attached.run.run_dir.name}, started before the studio "
                    "was last closed). Stop it first, or add this config to the queue.")
        return self.process.busy_message()

    def set_project_root(self, root: Path | None) -> None:
        self.queue = RunQueue(root) if root is not None else None
        self.sig_queue_changed.emit()

    # ------------------------------------------------------------ start
    def start_config(self, config: TrainConfig, config_dir: Path) -> Path | None:
        """Write a run folder for `config` and start it; None (and sig_message) if refused."""
        if self.running:
            self.sig_message.emit(self.busy_message())
            return None
        try:
            plan = prepare_run(config, config_dir)
        except OSError as exc:  # RunFolderError: it says where and what to do
            self.sig_message.emit(f"Could not start the run: {exc}")
            return None
        except NoTrainingPython as exc:
            self.sig_message.emit(f"Cannot train yet: {exc}.")
            return None
        return plan.run_dir if self._launch(plan) else None

    def resume(self, run_dir: Path) -> bool:
        if self.running:
            self.sig_message.emit(self.busy_message())
            return False
        holder = lock_holder(run_dir)
        if holder is not None:
            self.sig_message.emit(f"Cannot resume: {RunLockedError(run_dir, holder)}")
            return False
        try:
            config = load_config(run_dir / CONFIG_FILE)
        except (ConfigError, OSError) as exc:
            self.sig_message.emit(f"Cannot resume {run_dir.name}: its {CONFIG_FILE} is unreadable: {exc}")
            return False
        try:
            python = launch.training_python(config)
        except NoTrainingPython as exc:
            self.sig_message.emit(f"Cannot resume {run_dir.name} yet: {exc}.")
            return False
        plan = RunPlan(run_dir, launch.build_command(run_dir, python, resume=True), config)
        return self._launch(plan, keep_model=True)

    def _launch(self, plan: RunPlan, keep_model: bool = False) -> bool:
        command = self.command_factory(plan)
        self.model = RunModel(plan.run_dir)
        self.tail = EventTail(plan.run_dir / EVENTS_FILE, max_bytes=POLL_BYTES)
        if keep_model:  # a resumed run continues its curves
            self.model.apply_all(self.tail.finish_items())
            self.model.status, self.model.finished = "preparing", None
        self._stall_kill_armed = False
        # Unbuffered output: the console pane shows each line as the trainer prints it.
        if not self._trainer.start_run(command, plan.run_dir, env=launch.training_env({})):
            return False
        self._timer.start()
        self.sig_run_started.emit(plan.run_dir)
        self.sig_tick.emit()
        return True

    def follow_remote(self, remote: RemoteRun) -> bool:
        """Follow a run on a remote machine with the same tail, plots, Stop and Kill as a local one."""
        if self.running:
            self.sig_message.emit(self.process.busy_message())
            return False
        self.process = remote
        self._connect(remote)
        self.model = RunModel(remote.run_dir)
        self.tail = EventTail(remote.run_dir / EVENTS_FILE, max_bytes=POLL_BYTES)
        self._stall_kill_armed = False
        remote.start()
        self._timer.start()
        self.sig_run_started.emit(remote.run_dir)
        self.sig_tick.emit()
        return True

    def _on_started(self) -> None:
        if self.process is self._trainer:  # a remote run says where it runs itself
            self.sig_console.emit(f"[studio] trainer started (pid {self.process.pid()})")

    # ------------------------------------------------------------ follow
    def tick(self) -> None:
        if self.tail is None:
            return
        before = self.model.version
        events = self.tail.poll_items()
        if self.tail.restarted:
            self.model.reset()
        self.model.apply_all(events)
        if self.model.finished is not None and self.running and not self._stall_kill_armed:
            # The trainer said it is done; if it does not exit (a hung teardown), end it.
            self._stall_kill_armed = True
            QTimer.singleShot(self.finish_grace_ms, self._kill_if_still_running)
        if self.model.version != before:
            self.sig_tick.emit()

    def _kill_if_still_running(self) -> None:
        if self.running and self.model.finished is not None:
            self.sig_console.emit("[studio] the trainer finished but did not exit; ending it")
            self.process.kill()

    def _on_finished(self, exit_code: int, how: str) -> None:
        self._timer.stop()
        if self.tail is not None:
            self.model.apply_all(self.tail.finish_items())
        source = self.process
        if isinstance(source, RemoteRun):  # the next local run starts the local trainer again
            self.process = self._trainer
            source.shutdown()
            source.deleteLater()
        if how == "detached":
            self.sig_run_ended.emit("detached")
            return
        self._say_outcome(exit_code)
        if not self.model.ended:
            if source.killed:
                self.model.mark_ended("stopped", "Killed on request; the run can be resumed from its last checkpoint.")
            elif how == "failed to start":
                self.model.mark_ended("failed", "The trainer could not be started; see the console.")
            else:
                self.model.mark_ended(
                    "failed",
                    f"The trainer exited with code {exit_code} ({how}) before it finished; "
                    "the console shows its last words.",
                )
        self.sig_tick.emit()
        self._finish_queue_item()
        self.sig_run_ended.emit(self.model.status)
        self._start_next_queued()

    # ------------------------------------------------------------ a run left running
    def attach_live(self, runs_dir: Path) -> LiveRun | None:
        """Follow the newest run under `runs_dir` whose trainer is still working (the studio was closed
        with "keep running"); None when there is none, or while this controller has a run."""
        if self.running:
            return None
        live = find_live_runs(runs_dir)
        if not live:
            return None
        self.attach(live[0])
        return live[0]

    def attach(self, run: LiveRun) -> None:
        self.model = RunModel(run.run_dir)
        self.tail = EventTail(run.run_dir / EVENTS_FILE, max_bytes=POLL_BYTES)
        self.model.apply_all(self.tail.finish_items())
        self._stall_kill_armed = False
        attached = AttachedRun(run, self)
        attached.sig_output.connect(self.sig_console)
        attached.sig_progress.connect(self.sig_progress)
        attached.sig_ended.connect(self._attached_ended)
        self.attached = attached
        self._timer.start()
        self.sig_run_started.emit(run.run_dir)
        self.sig_console.emit(f"[studio] following the training left running in {run.run_dir} "
                              f"(process {run.pid}); Stop and Kill work as for any run")
        self.sig_tick.emit()

    def _attached_ended(self) -> None:
        attached, self.attached = self.attached, None
        self._timer.stop()
        if self.tail is not None:
            self.model.apply_all(self.tail.finish_items())
        if not self.model.ended:
            if attached is not None and attached.killed:
                self.model.mark_ended("stopped", "Killed on request; the run can be resumed from its last checkpoint.")
            else:
                self.model.mark_ended("failed", "The trainer ended without saying it finished; its console.log "
                                                "in the run folder shows its last words.")
        if attached is not None:
            attached.deleteLater()
        self.sig_tick.emit()
        self.sig_run_ended.emit(self.model.status)

    def _say_outcome(self, exit_code: int) -> None:
        """End the console (the pane and console.log) with the studio's one line about the run."""
        run_dir = self.process.run_dir
        if run_dir is None:
            return
        line = outcome_line(run_dir, exit_code)
        try:
            with open(run_dir / CONSOLE_FILE, "a", encoding="utf-8", errors="backslashreplace") as console:
                console.write(line + "\n")
        except OSError as exc:
            self.sig_console.emit(f"[studio] cannot add to {run_dir / CONSOLE_FILE}: {exc}")
        self.sig_console.emit(line)

    # ------------------------------------------------------------ stop / kill
    def stop(self) -> bool:
        if self.attached is not None:
            return self.attached.stop()
        return self.process.stop()

    def kill(self) -> None:
        if self.attached is not None:
            self.attached.kill()
        else:
            self.process.kill()

    def kill_now(self, timeout_s: float = 5.0) -> None:
        """Blocking kill of the run (the window closing after a stop that did not come in time)."""
        if self.attached is not None:
            self.attached.kill_now(timeout_s)
        else:
            self.process.kill_now(timeout_s)

    # ------------------------------------------------------------ replay
    def open_replay(self, run_dir: Path) -> Replay | None:
        """Show a finished (or copied-back) run; refused while a run is live in the views."""
        if self.running:
            self.sig_message.emit("A training is running; its plots stay on the Train page. Open the run when it ends.")
            return None
        rep = replay_run(run_dir)
        self.model, self.tail = rep.model, None
        self.sig_tick.emit()
        return rep

    # ------------------------------------------------------------ queue
    def start_queue(self) -> None:
        if self.queue is None:
            self.sig_message.emit("Open a project first: the queue lives in the project folder.")
            return
        if not self.running:
            self._start_next_queued(by_hand=True)

    def _start_next_queued(self, by_hand: bool = False) -> None:
        """Start the next pending item (by hand: even when the queue holds after each run)."""
        queue = self.queue
        if queue is None or self.running:
            return
        item = queue.next_pending(by_hand)
        if item is None:
            return
        path = Path(item.config)
        try:
            config = load_config(path)
        except (ConfigError, OSError) as exc:
            queue.mark_ended(item.id, "failed", f"config unreadable: {exc}")
            self.sig_message.emit(f"Queued config {path} cannot be used: {exc}")
            self.sig_queue_changed.emit()
            QTimer.singleShot(0, self._start_next_queued)
            return
        errors, _warnings = preflight_headless(config, path.parent)  # nobody is there to confirm a warning
        if errors:
            why = " ".join(str(e) for e in errors)
            queue.mark_ended(item.id, "failed", why)
            self.sig_message.emit(f"Queued config {path} was not started: {why}")
            self.sig_queue_changed.emit()
            QTimer.singleShot(0, self._start_next_queued)
            return
        run_dir = self.start_config(config, path.parent)
        if run_dir is None:
            queue.mark_ended(item.id, "failed", "could not start")
        else:
            self._queue_item = item.id
            queue.mark_running(item.id, run_dir)
        self.sig_queue_changed.emit()

    def _finish_queue_item(self) -> None:
        if self.queue is None or self._queue_item is None:
            return
        state = {"finished": "completed"}.get(self.model.status, self.model.status)
        # The item may have been removed from the queue file meanwhile.
        with contextlib.suppress(QueueError):
            self.queue.mark_ended(self._queue_item, state, self.model.message)
        self._queue_item = None
        self.sig_queue_changed.emit()

    # ------------------------------------------------------------ shutdown
    def shutdown(self, detach: bool = False) -> None:
        self._timer.stop()
        if self.attached is not None:
            if not detach:
                self.attached.kill_now()
            self.attached.release()
            return
        if not self.running:
            return
        if detach:
            self.process.detach()
        else:
            self.process.kill_now()

