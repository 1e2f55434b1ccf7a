"""The run queue: configs trained one after the other, persisted in `<project>/queue.json`.

Every change is written at once (atomically), so the queue survives a crash of the app;
on the next start an item that was running is marked interrupted and can be resumed.

Two studio windows may have the project open. Each change is made under the project's lock
on what the file holds then (read, change, write), so no window's save drops another's item.
One process at a time runs the queue: it holds the runner lock (`.queue.lock`, an OS lock
the kernel drops when the process ends) while its queue goes on, and claims each item under
the project's lock before starting it. Another window that presses Start queue is told the
queue runs there, with that process's pid.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from studio.core.files import atomic_write_text
from studio.core.project_lock import ProjectBusyError, project_lock
from studio.core.runs.event_reading.glance import glance_run
from studio.core.runs.scheduling.lock import LockHolder, RunLock, RunLockedError, lock_holder

log = logging.getLogger(__name__)

QUEUE_FILE = "queue.json"
RUNNER_LOCK_FILE = ".queue.lock"  # held by the process that runs the project's queue
QUEUE_VERSION = 1
STATES = ("pending", "running", "completed", "stopped", "failed", "interrupted")


@dataclass
class QueueItem:
    id: str
    config: str  # path of the config file, as added
    state: str = "pending"
    run_dir: str = ""
    added: float = 0.0
    started: float = 0.0
    ended: float = 0.0
    message: str = ""
    sweep: str = ""  # the sweep it belongs to ("<name>-<field>"), or empty
    claimed_by: int = 0  # the pid of the process that claimed it to start it

    @property
    def name(self) -> str:
        return Path(self.config).name

    @property
    def label(self) -> str:
        """The file with its folder: the studio.toml files of two projects tell apart."""
        path = Path(self.config)
        return f"{path.parent.name}/{path.name}" if path.parent.name else path.name

    @property
    def resumable(self) -> bool:
        return self.state in ("interrupted", "stopped", "failed") and bool(self.run_dir)


class QueueError(Exception):
    pass


class QueueBusyError(QueueError):
    """The project's queue runs in another process; the message names it and what to do."""

    def __init__(self, root: Path, holder: LockHolder) -> None:
        self.holder = holder
        super().__init__(f"The queue of {root.name} runs in another studio window, {holder.describe()}: its items "
                         "start there, one after the other. Stop it there (Stop after current) or close that "
                         "window, then press Start queue here.")


_T = TypeVar("_T")


class RunQueue:
    """Load with `RunQueue(project_root)`; every method that changes it saves it."""

    def __init__(self, project_root: str | Path) -> None:
        self.root = Path(project_root)
        self.path = self.root / QUEUE_FILE
        self.items: list[QueueItem] = []
        self.stop_after_current = False
        self.continue_on_error = False  # after a failed run: go on with the next (else the queue holds)
        self._runner: RunLock | None = None
        self._seen: tuple[int, int, int] | None = None  # the queue file as last read or written here
        with project_lock(self.root):
            try:
                self._load(recover=True)
            except OSError as exc:  # shown empty for now; the window reads it again once it can
                log.warning("the queue file %s cannot be read now (%s)", self.path, exc)
                self._seen = None

    # ------------------------------------------------------------ persistence
    def refresh(self) -> None:
        """Read the queue file again: what another window changed shows here."""
        with project_lock(self.root):
            self._load(recover=True)

    def changed_on_disk(self) -> bool:
        """Whether another window (or process) wrote the queue file since this one read or wrote it."""
        return self._stamp() != self._seen

    def _stamp(self) -> tuple[int, int, int] | None:
        """The file's identity and age: a save replaces it (a new inode), so a change in the same tick shows."""
        try:
            info = self.path.stat()
        except OSError:
            return None
        return info.st_ino, info.st_mtime_ns, info.st_size

    def _change(self, change: Callable[[], _T]) -> _T:
        """`change` applied to what the file holds now, and saved, under the project's lock."""
        try:
            with project_lock(self.root):
                self._load()
                result = change()
                self.save()
        except ProjectBusyError as exc:
            raise QueueError(f"The queue was not changed: {exc}") from None
        except OSError as exc:  # the file held by another program (a sync client), a network share gone
            with contextlib.suppress(OSError):
                self._load()  # what the file still holds, not the change that was not saved
            raise QueueError(f"The queue was not changed: {self.path} could not be read or written "
                             f"({exc.strerror or exc}); try again") from None
        return result

    def _load(self, recover: bool = False) -> None:
        """What the file holds; `recover`: an item left running by a studio that ended is marked so."""
        self.items = []
        self._seen = self._stamp()
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        # Any other OSError is raised: a file held by another program or on a network share gone for a moment
        # is not damaged (it was put aside as damaged, and the queue shown and saved empty).
        try:
            data = json.loads(text)
            self.stop_after_current = bool(data.get("stop_after_current", False))
            self.continue_on_error = bool(data.get("continue_on_error", False))
            known = set(QueueItem.__dataclass_fields__)
            self.items = [QueueItem(**{k: v for k, v in raw.items() if k in known}) for raw in data["items"]]
        except (ValueError, KeyError, TypeError) as exc:
            # Keep the damaged file for the person to look at; start with an empty queue.
            backup = self.path.with_suffix(".json.damaged")
            log.warning("queue file %s is unreadable (%s); kept as %s, starting empty", self.path, exc, backup)
            with contextlib.suppress(OSError):
                self.path.replace(backup)
            self.items = []
            return
        if not recover or self.runner_held or self.runner_holder() is not None:
            return  # a studio window runs the queue: its running item is running
        if self._recover():
            self.save()

    def _recover(self) -> bool:
        """Items marked running that no process runs (a studio that ended, a mark that could not be saved) say
        what became of them; whether any changed. Only while no other process runs the queue."""
        changed = False
        for item in self.items:
            if item.state == "running" and not item.run_dir:  # claimed, never started: nothing ran
                item.state, item.claimed_by = "pending", 0
                changed = True
            elif item.state == "running" and lock_holder(item.run_dir) is None:  # its trainer ended too
                finished = glance_run(item.run_dir).finished
                if finished is not None:  # left running when the studio closed ("keep running"), it ended since
                    item.state = finished.status if finished.status in ("completed", "stopped") else "failed"
                    item.message, item.ended = finished.message, finished.time
                else:  # the app ended while this ran: the run folder holds what was done
                    item.state = "interrupted"
                    item.message = "the studio closed while this ran; resume it from its run folder"
                changed = True
        return changed

    def save(self) -> None:
        data: dict[str, Any] = {
            "version": QUEUE_VERSION,
            "stop_after_current": self.stop_after_current,
            "continue_on_error": self.continue_on_error,
            "items": [asdict(item) for item in self.items],
        }
        atomic_write_text(self.path, json.dumps(data, indent=1) + "\n")
        self._seen = self._stamp()

    # ------------------------------------------------------------ editing
    def get(self, item_id: str) -> QueueItem:
        for item in self.items:
            if item.id == item_id:
                return item
        raise QueueError(f"no queue item {item_id!r}")

    def add(self, config_path: str | Path, sweep: str = "") -> QueueItem:
        path = Path(config_path)
        if not path.is_file():
            raise QueueError(f"{path} does not exist; pick a config file (.toml) to queue")
        item = QueueItem(id=uuid.uuid4().hex[:12], config=str(path.resolve()), added=time.time(), sweep=sweep)
        self._change(lambda: self.items.append(item))
        return item

    def remove(self, item_id: str) -> None:
        def change() -> None:
            item = self.get(item_id)
            if item.state == "running":
                raise QueueError(f"{item.name} is running; stop it before removing it from the queue")
            self.items.remove(item)

        self._change(change)

    def move(self, item_id: str, index: int) -> None:
        def change() -> None:
            item = self.get(item_id)
            self.items.remove(item)
            self.items.insert(max(0, min(index, len(self.items))), item)

        self._change(change)

    def set_stop_after_current(self, value: bool) -> None:
        self._change(lambda: setattr(self, "stop_after_current", value))

    def set_continue_on_error(self, value: bool) -> None:
        self._change(lambda: setattr(self, "continue_on_error", value))

    def add_sweep(self, item_id: str, configs: list[Path], sweep: str) -> list[QueueItem]:
        """The sweep's configs queued where `item_id` stood (a pending item is replaced by them)."""
        new = [QueueItem(id=uuid.uuid4().hex[:12], config=str(p.resolve()), added=time.time(), sweep=sweep)
               for p in configs]

        def change() -> None:
            item = self.get(item_id)
            index = self.items.index(item)
            if item.state == "pending":
                self.items[index:index + 1] = new
            else:
                self.items[index + 1:index + 1] = new

        self._change(change)
        return new

    # ------------------------------------------------------------ running
    @property
    def running(self) -> QueueItem | None:
        return next((i for i in self.items if i.state == "running"), None)

    def why_nothing_starts(self) -> str:
        """Why Start queue started nothing, in the window's words."""
        running = self.running
        if running is not None:  # its trainer goes on without this window (the studio closed with "keep running")
            where = f" (run {Path(running.run_dir).name})" if running.run_dir else ""
            return f"{running.label} still trains{where}: Start queue starts the next item once it has ended."
        return ("No config waits in the queue: add one (Add config…); a stopped or interrupted run is resumed from "
                "the Runs table.")

    def goes_on_note(self) -> str:
        """What follows the running item's stop by hand, in the window's words: a Stop is not a hold."""
        waiting = sum(1 for i in self.items if i.state == "pending")
        if not waiting or self.stop_after_current:
            return ""
        return (f" Then the queue starts its next run ({waiting} waiting): to hold it, tick \"Stop the queue after the "
                "current run\" on the Runs page's Queue tab.")

    def goes_on_after(self, failed: bool, disk_full: bool) -> tuple[bool, str]:
        """Whether the queue starts its next item after a queued run ended, and why not, in the window's words: after
        a failed run it holds unless set to continue on error; after one that filled the disk it holds even then,
        as every run after it would fail the same way, all night."""
        if not failed or (self.continue_on_error and not disk_full):
            return True, ""
        pending = sum(1 for item in self.items if item.state == "pending")
        if pending and disk_full:
            return False, (f"A queued run failed: its disk is full. The queue holds ({pending} waiting), Continue on "
                           "error or not: free some space, then press Start queue.")
        if pending:
            return False, (f"A queued run failed; the queue holds ({pending} waiting). Tick \"Continue on error\" "
                           "to go on past failed runs, or Start queue to go on now.")
        return False, ""

    def next_pending(self, by_hand: bool = False) -> QueueItem | None:
        """The item to start now; None while one runs, or after a run while "stop after current" is
        set. It stays set: each start by hand (`by_hand`) then runs one more item."""
        if (self.stop_after_current and not by_hand) or self.running is not None:
            return None
        return next((i for i in self.items if i.state == "pending"), None)

    def mark_running(self, item_id: str, run_dir: str | Path) -> None:
        def change() -> None:
            item = self.get(item_id)
            item.state, item.run_dir, item.started, item.message = "running", str(run_dir), time.time(), ""

        self._change(change)

    def mark_pending(self, item_id: str, message: str) -> None:
        """A claimed item that could not be started (nothing ran): it waits again, with why, for the next start."""
        def change() -> None:
            item = self.get(item_id)
            item.state, item.run_dir, item.started, item.claimed_by, item.message = "pending", "", 0.0, 0, message

        self._change(change)

    def mark_ended(self, item_id: str, state: str, message: str = "") -> None:
        if state not in STATES or state in ("pending", "running"):
            raise QueueError(f"{state!r} is not an end state; use one of completed, stopped, failed, interrupted")

        def change() -> None:
            item = self.get(item_id)
            item.state, item.ended, item.message = state, time.time(), message

        self._change(change)

    # ------------------------------------------------------------ one runner per project
    @property
    def runner_held(self) -> bool:
        """Whether this process runs the project's queue (it holds the runner lock)."""
        return self._runner is not None and self._runner.held

    def runner_holder(self) -> LockHolder | None:
        """The other live process that runs this project's queue, or None."""
        if self.runner_held:
            return None
        holder = lock_holder(self.root, RUNNER_LOCK_FILE)
        return holder if holder is not None and holder.pid != os.getpid() else None

    def take_runner(self) -> None:
        """Become the process that runs the queue, or QueueBusyError naming the one that does."""
        if self.runner_held:
            return
        runner = RunLock(self.root, RUNNER_LOCK_FILE)
        try:
            runner.acquire()
        except RunLockedError as exc:
            raise QueueBusyError(self.root, exc.holder) from None
        self._runner = runner

    def release_runner(self) -> None:
        """The queue stops going on here (it ended, holds, or the window closes): another window may run it."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.release()

    def claim_next(self, by_hand: bool = False) -> QueueItem | None:
        """Take the runner lock and claim the item to start now, or None (see `next_pending`).

        The claim is made under the project's lock on what the file holds then: the item is
        marked running (by this pid) before anyone starts it, so no other process starts it too.
        Raises QueueBusyError while another process runs the queue."""
        self.take_runner()

        def change() -> QueueItem | None:
            # This process runs the queue and starts nothing now: an item still marked running is no one's claim
            # (its end could not be saved: the file held by a sync client for a moment), not a run to wait for.
            self._recover()
            item = self.next_pending(by_hand)
            if item is not None:
                item.state, item.run_dir, item.started, item.message = "running", "", time.time(), ""
                item.claimed_by = os.getpid()
            return item

        return self._change(change)
