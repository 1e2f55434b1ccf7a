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
from studio.core.config.files.paths import ResolvedConfig, load_resolved, moved_with_its_run
from studio.core.estimate.plans.card_fill import filled_for_launch
from studio.core.runs import launch
from studio.core.runs.folders import ACCELERATE_FILE, CONFIG_FILE, CONSOLE_FILE, EVENTS_FILE
from studio.core.runs.launch import RunPlan, prepare_run
from studio.core.runs.live import LiveRun, find_live_runs
from studio.core.runs.records.history import newest_run
from studio.core.runs.records.outcome import outcome_line
from studio.core.runs.records.run_model import EventTail, RunModel
from studio.core.runs.scheduling.lock import RunLockedError, lock_holder
from studio.core.runs.scheduling.queue import QueueError, RunQueue
from studio.core.training_python import NoTrainingPython
from studio.gui.runner.attached_run import AttachedRun
from studio.gui.runner.gpu_memory import GpuMemorySampler
from studio.gui.runner.local_run import LocalRun
from studio.gui.runner.process import Outcome
from studio.gui.runner.queue_start import start_next_queued
from studio.gui.runner.remote_run import RemoteRun
from studio.gui.runner.replay_run import ReplayRun
from studio.gui.runner.source import RunSource
from studio.gui.runner.worker import Worker

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
        self.use_launcher = True  # the trainer in a session of its own, so it can outlive the window
        self.model = RunModel()
        self.tail: EventTail | None = None
        self.queue: RunQueue | None = None
        self.source: RunSource | None = None  # the run the views show: local, remote, re-attached or replayed
        self.worker = Worker(self)  # replays are read here
        self._run_dir: Path | None = None
        self._queue_item: str | None = None
        self._hold_queue = False  # the window closes: the run ending now starts no queued item after it
        self._stall_kill_armed = False
        self._timer = QTimer(self)
        self._timer.setInterval(max(50, int(1000 / redraw_hz)))
        self._timer.timeout.connect(self.tick)

    # ------------------------------------------------------------ state
    @property
    def gpu_sampler(self) -> GpuMemorySampler | None:
        """The GPUs the plots show for the current run: a remote machine's, or None for this one's."""
        return self.source.gpu_sampler() if self.source is not None else None

    @property
    def running(self) -> bool:
        return self.source is not None and self.source.is_running()

    @property
    def run_dir(self) -> Path | None:
        """The folder of the run shown last (it stays after the run ends)."""
        return self._run_dir

    def busy_message(self) -> str:
        return self.source.busy_message() if self.source is not None else ""

    def close_question(self) -> str:
        """What the studio asks when it is closed while the run goes on; a queued run's waiting items are named:
        nobody runs the queue while the studio is closed, whether the run is stopped or kept running."""
        text = self.source.close_question() if self.source is not None else "A training is running."
        waiting = sum(1 for i in self.queue.items if i.state == "pending") if self.queue is not None else 0
        if self._queue_item is not None and waiting:
            runs = "next run starts" if waiting == 1 else f"{waiting} waiting runs start"
            text += f"\n\nThe queue stops here either way: its {runs} only when Start queue is pressed again."
        return text

    def queue_goes_on_note(self) -> str:
        """Said when the run is stopped by hand: a queued run's queue then starts its next item."""
        return self.queue.goes_on_note() if self.queue is not None and self._queue_item is not None else ""

    def set_project_root(self, root: Path | None) -> None:
        if self.queue is not None:
            self.queue.release_runner()
        self.queue = RunQueue(root) if root is not None else None
        self.sig_queue_changed.emit()

    # ------------------------------------------------------------ start
    def start_config(self, config: ResolvedConfig, warnings: list[str] | None = None) -> Path | None:
        """Write a run folder for `config` and start it; None (and sig_message) if refused. `warnings`: the
        checks' warnings nobody was there to confirm (a queued run), said first in its console."""
        if self.running:
            self.sig_message.emit(self.busy_message())
            return None
        filled = filled_for_launch(config)  # training.fill_card: the run starts with the card used
        said = [f"started from the queue despite: {warning}" for warning in warnings or ()]
        try:
            plan = prepare_run(filled.config, note="\n".join([*said, filled.describe()]).strip())
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
            config, _ = moved_with_its_run(load_resolved(run_dir / CONFIG_FILE), run_dir)  # the trainer says it
        except (ConfigError, OSError) as exc:
            self.sig_message.emit(f"Cannot resume {run_dir.name}: its {CONFIG_FILE} is unreadable: {exc}")
            return False
        try:
            python = launch.training_python(config)
        except NoTrainingPython as exc:
            self.sig_message.emit(f"Cannot resume {run_dir.name} yet: {exc}.")
            return False
        try:
            launch.launch_as_configured(config, run_dir)  # launch.num_processes, gpu_ids edited in config.toml
        except (OSError, ValueError) as exc:
            self.sig_message.emit(f"Cannot resume {run_dir.name}: its {ACCELERATE_FILE} cannot be written: {exc}")
            return False
        plan = RunPlan(run_dir, launch.build_command(run_dir, python, resume=True), config)
        return self._launch(plan, resumed=True)

    def _launch(self, plan: RunPlan, resumed: bool = False) -> bool:
        command = self.command_factory(plan)
        # Unbuffered output: the console pane shows each line as the trainer prints it.
        run = LocalRun(plan.run_dir, command, env=launch.training_env({}), resumed=resumed,
                       use_launcher=self.use_launcher, parent=self)
        return self.follow(run)

    def follow_remote(self, remote: RemoteRun) -> bool:
        """Follow a run on a remote machine with the same tail, plots, Stop and Kill as a local one."""
        return self.follow(remote)

    def follow(self, source: RunSource) -> bool:
        """Show `source` in the views: its events tailed, its console passed on; refused while a run goes on."""
        if self.running:
            self.sig_message.emit(self.busy_message())
            return False
        self._let_go()
        self.source, self._run_dir = source, source.run_dir
        source.sig_output.connect(self.sig_console)
        source.sig_progress.connect(self.sig_progress)
        source.sig_error.connect(self.sig_message)
        source.sig_ended.connect(lambda outcome, s=source: self._ended(s, outcome))
        source.sig_model.connect(lambda model, s=source: self._take_model(s, model))
        self.model = RunModel(source.run_dir)
        self.tail = EventTail(source.run_dir / EVENTS_FILE, max_bytes=POLL_BYTES) if source.live else None
        if self.tail is not None:
            source.catch_up(self.model, self.tail)
        self._stall_kill_armed = False
        if not source.start():
            self._let_go()
            return False
        if source.live:
            self._timer.start()
            self.sig_run_started.emit(source.run_dir)
        self.sig_tick.emit()
        return True

    def _let_go(self) -> None:
        """Forget the source shown before (a run that ended, a replay)."""
        source, self.source = self.source, None
        if source is not None:
            source.release()

    def _take_model(self, source: RunSource, model: RunModel) -> None:
        if source is self.source:
            self.model = model
            self.sig_tick.emit()

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
            QTimer.singleShot(self.finish_grace_ms, self, self._kill_if_still_running)
        if self.model.version != before:
            self.sig_tick.emit()

    def _kill_if_still_running(self) -> None:
        if self.running and self.model.finished is not None and self.source is not None:
            self.sig_console.emit("[studio] the trainer finished but did not exit; ending it")
            self.source.kill()

    def _ended(self, source: RunSource, outcome: Outcome) -> None:
        if source is not self.source:
            return
        self._timer.stop()
        if self.tail is not None:
            self.model.apply_all(self.tail.finish_items())
        self._let_go()
        if outcome.how == "detached":
            self.sig_run_ended.emit("detached")
            return
        if source.says_outcome:
            self._say_outcome(source.run_dir, outcome.code)
        if not self.model.ended:
            self.model.mark_ended("stopped" if source.killed else "failed", source.unfinished(outcome))
        self.sig_tick.emit()
        queued = self._queue_item is not None  # a run started with Train or Resume leaves the queue as it is
        failed = self.model.status == "failed" and queued
        disk_full = failed and any(e.kind == "disk_full" for e in self.model.errors)
        if source.owned:
            self._finish_queue_item()
        else:
            self._finish_queue_item_left_running(source.run_dir)
        self.sig_run_ended.emit(self.model.status)
        hold, self._hold_queue = self._hold_queue, False
        if source.owned and queued and not hold and self._queue_goes_on(failed, disk_full):
            self._start_next_queued()
        elif self.queue is not None and not self.running:
            self.queue.release_runner()

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
        self.follow(AttachedRun(run, self))

    def _say_outcome(self, run_dir: Path, exit_code: int) -> None:
        """End the console (the pane and console.log) with the studio's one line about the run."""
        line = outcome_line(run_dir, exit_code)
        try:
            with open(run_dir / CONSOLE_FILE, "a", encoding="utf-8", errors="backslashreplace") as console:
                console.write(line + "\n")
        except OSError as exc:
            self.sig_console.emit(f"[studio] cannot add to {run_dir / CONSOLE_FILE}: {exc}")
        self.sig_console.emit(line)

    # ------------------------------------------------------------ stop / kill
    def stop(self, hold_queue: bool = False) -> bool:
        """Ask the run to stop at its next step. `hold_queue` (the window closes): the queue starts nothing
        after it; its next items wait for the next Start queue (they were started and stopped one by one)."""
        if not self.running or self.source is None:
            return False
        self._hold_queue = self._hold_queue or hold_queue
        return self.source.stop()

    def kill(self) -> None:
        if self.running and self.source is not None:
            self.source.kill()

    def kill_now(self, timeout_s: float = 5.0) -> None:
        """Blocking kill of the run (the window closing after a stop that did not come in time); the queue
        starts nothing after it."""
        if self.running and self.source is not None:
            self._hold_queue = True
            self.source.kill_now(timeout_s)

    # ------------------------------------------------------------ replay
    def open_replay(self, run_dir: Path) -> ReplayRun | None:
        """Show a finished (or copied-back) run, read on the worker; refused while a run is live in the views.

        The views show it when the source's model arrives (`ReplayRun.replay` is then set)."""
        if self.running:
            self.sig_message.emit("A training is running; its plots stay on the Train page. Open the run when it ends.")
            return None
        replay = ReplayRun(run_dir, self.worker, self)
        return replay if self.follow(replay) else None

    def show_last_run(self, runs_dir: Path | None) -> None:
        """Between runs (another project opened): the views show the newest run under `runs_dir`, or
        no run, never the run of the project before."""
        if self.running:
            return
        newest = newest_run(runs_dir) if runs_dir is not None else None
        if newest is not None and self.open_replay(newest) is not None:
            return
        self._let_go()
        self._timer.stop()
        self.model, self.tail, self._run_dir = RunModel(), None, None
        self.sig_tick.emit()

    # ------------------------------------------------------------ queue
    def start_queue(self) -> None:
        if self.queue is None:
            self.sig_message.emit("Open a project first: the queue lives in the project folder.")
            return
        if not self.running:
            self._start_next_queued(by_hand=True)
        elif self._queue_item is None:  # a run started with Train: the queue would share the GPU with it
            self.sig_message.emit("A run is training: start the queue when it has ended.")

    def _start_next_queued(self, by_hand: bool = False) -> None:
        """Start the next pending item (by hand: even when the queue holds after each run); see queue_start.py."""
        start_next_queued(self, by_hand)

    def _go_on_after_refusal(self) -> None:
        """A queued config refused before it started (unreadable, or its checks failed) holds the queue as a
        failed run does: a cause shared by the items after it (the base model not downloaded, a drive of images
        not connected) would otherwise fail each of them in turn, and the whole queue would have to be made
        again once it is fixed."""
        self.sig_queue_changed.emit()
        if self._queue_goes_on(failed=True):
            QTimer.singleShot(0, self, self._start_next_queued)
        elif self.queue is not None:
            self.queue.release_runner()

    def _queue_goes_on(self, failed: bool, disk_full: bool = False) -> bool:
        """After a queued run that failed, the queue goes on only as RunQueue.goes_on_after says; why it holds is
        said."""
        if self.queue is None:
            return True
        goes_on, why = self.queue.goes_on_after(failed, disk_full)
        if why:
            self.sig_message.emit(why)
        return goes_on

    def _finish_queue_item_left_running(self, run_dir: Path) -> None:
        """A queued run this studio followed again after a restart ("keep running") ended: its item says how,
        rather than "running" for good (which held the queue: Start queue started nothing). A queue that
        runs in another window is that window's to mark."""
        queue = self.queue
        if queue is None or queue.runner_held or queue.runner_holder() is not None:
            return
        item = next((i for i in queue.items if i.state == "running" and i.run_dir
                     and Path(i.run_dir) == run_dir), None)
        if item is not None:
            self._queue_item = item.id
            self._finish_queue_item()

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
        if self.queue is not None:
            self.queue.release_runner()
        source = self.source
        if source is None or not source.is_running():
            return
        self._hold_queue = True  # the run ending now (killed) starts no queued item while the window closes
        if detach:
            source.detach()
        else:
            source.kill_now()

