"""The run queue: configs trained one after the other, persisted in `<project>/queue.json`.

Every change is written at once (atomically), so the queue survives a crash of the app;
on the next start an item that was running is marked interrupted and can be resumed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from studio.core.files import atomic_write_text

log = logging.getLogger(__name__)

QUEUE_FILE = "queue.json"
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


class RunQueue:
    """Load with `RunQueue(project_root)`; every method that changes it saves it."""

    def __init__(self, project_root: str | Path) -> None:
        self.path = Path(project_root) / QUEUE_FILE
        self.items: list[QueueItem] = []
        self.stop_after_current = False
        self.continue_on_error = False  # after a failed run: go on with the next (else the queue holds)
        self._load()

    # ------------------------------------------------------------ persistence
    def _load(self) -> None:
        if not self.path.is_file():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.stop_after_current = bool(data.get("stop_after_current", False))
            self.continue_on_error = bool(data.get("continue_on_error", False))
            known = set(QueueItem.__dataclass_fields__)
            self.items = [QueueItem(**{k: v for k, v in raw.items() if k in known}) for raw in data["items"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Keep the damaged file for the person to look at; start with an empty queue.
            backup = self.path.with_suffix(".json.damaged")
            log.warning("queue file %s is unreadable (%s); kept as %s, starting empty", self.path, exc, backup)
            with contextlib.suppress(OSError):
                self.path.replace(backup)
            self.items = []
            return
        changed = False
        for item in self.items:
            if item.state == "running":
                # The app ended while this ran: the run folder holds what was done.
                item.state = "interrupted"
                item.message = "the studio closed while this ran; resume it from its run folder"
                changed = True
        if changed:
            self.save()

    def save(self) -> None:
        data: dict[str, Any] = {
            "version": QUEUE_VERSION,
            "stop_after_current": self.stop_after_current,
            "continue_on_error": self.continue_on_error,
            "items": [asdict(item) for item in self.items],
        }
        atomic_write_text(self.path, json.dumps(data, indent=1) + "\n")

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
        self.items.append(item)
        self.save()
        return item

    def remove(self, item_id: str) -> None:
        item = self.get(item_id)
        if item.state == "running":
            raise QueueError(f"{item.name} is running; stop it before removing it from the queue")
        self.items.remove(item)
        self.save()

    def move(self, item_id: str, index: int) -> None:
        item = self.get(item_id)
        self.items.remove(item)
        index = max(0, min(index, len(self.items)))
        self.items.insert(index, item)
        self.save()

    def set_stop_after_current(self, value: bool) -> None:
        self.stop_after_current = value
        self.save()

    def set_continue_on_error(self, value: bool) -> None:
        self.continue_on_error = value
        self.save()

    def add_sweep(self, item_id: str, configs: list[Path], sweep: str) -> list[QueueItem]:
        """The sweep's configs queued where `item_id` stood (a pending item is replaced by them)."""
        item = self.get(item_id)
        index = self.items.index(item)
        new = [QueueItem(id=uuid.uuid4().hex[:12], config=str(p.resolve()), added=time.time(), sweep=sweep)
               for p in configs]
        if item.state == "pending":
            self.items[index:index + 1] = new
        else:
            self.items[index + 1:index + 1] = new
        self.save()
        return new

    # ------------------------------------------------------------ running
    @property
    def running(self) -> QueueItem | None:
        return next((i for i in self.items if i.state == "running"), None)

    def next_pending(self, by_hand: bool = False) -> QueueItem | None:
        """The item to start now; None while one runs, or after a run while "stop after current" is
        set. It stays set: each start by hand (`by_hand`) then runs one more item."""
        if (self.stop_after_current and not by_hand) or self.running is not None:
            return None
        return next((i for i in self.items if i.state == "pending"), None)

    def mark_running(self, item_id: str, run_dir: str | Path) -> None:
        item = self.get(item_id)
        item.state, item.run_dir, item.started, item.message = "running", str(run_dir), time.time(), ""
        self.save()

    def mark_ended(self, item_id: str, state: str, message: str = "") -> None:
        if state not in STATES or state in ("pending", "running"):
            raise QueueError(f"{state!r} is not an end state; use one of completed, stopped, failed, interrupted")
        item = self.get(item_id)
        item.state, item.ended, item.message = state, time.time(), message
        self.save()
