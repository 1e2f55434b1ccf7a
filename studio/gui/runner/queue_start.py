"""Starting the queue's next item: claimed first under the project's lock (another window running the queue is
named instead), its config read and checked before anything loads (a disk too full holds the queue, other refusals
fail the item as a failed run would), then started as Train starts a run."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Protocol

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import ResolvedConfig, load_resolved
from studio.core.project.preflight import preflight_headless
from studio.core.runs.scheduling.queue import QueueError, RunQueue


class QueueRunner(Protocol):
    """What starting a queued item needs of the run controller."""

    queue: RunQueue | None
    _queue_item: str | None
    sig_message: Any
    sig_queue_changed: Any

    @property
    def running(self) -> bool: ...

    def start_config(self, config: ResolvedConfig, warnings: list[str] | None = None) -> Path | None: ...

    def _go_on_after_refusal(self) -> None: ...


def start_next_queued(controller: QueueRunner, by_hand: bool = False) -> None:
    """Start the next pending item (by hand: even when the queue holds after each run).

    The item is claimed first, under the project's lock: another studio window on the same
    project that runs its queue is named instead, and starts nothing here."""
    queue = controller.queue
    if queue is None or controller.running:
        return
    try:
        item = queue.claim_next(by_hand)
    except (QueueError, OSError) as exc:  # another window runs it, or its file cannot be written
        with contextlib.suppress(OSError):
            queue.refresh()  # the other window's queue, as it stands
        controller.sig_message.emit(str(exc))
        controller.sig_queue_changed.emit()
        return
    if item is None:
        queue.release_runner()  # nothing to start: another window may run the queue now
        if by_hand:
            controller.sig_message.emit(queue.why_nothing_starts())
        controller.sig_queue_changed.emit()
        return
    path = Path(item.config)
    try:
        config = load_resolved(path)
    except (ConfigError, OSError) as exc:
        queue.mark_ended(item.id, "failed", f"config unreadable: {exc}")
        controller.sig_message.emit(f"Queued config {path} cannot be used: {exc}")
        controller._go_on_after_refusal()
        return
    errors, warnings = preflight_headless(config)  # nobody is there to confirm a warning: it is said in the run
    full = " ".join(str(e) for e in errors if e.check == "disk")
    if full:  # too full for this run, too full for the ones after it (Continue on error spent each as failed)
        queue.mark_pending(item.id, full)
        queue.release_runner()
        controller.sig_message.emit(f"Queued config {path} waits, and the queue holds: {full} Then press Start queue.")
        controller.sig_queue_changed.emit()
        return
    if errors:
        why = " ".join(str(e) for e in errors)
        queue.mark_ended(item.id, "failed", why)
        controller.sig_message.emit(f"Queued config {path} was not started: {why}")
        controller._go_on_after_refusal()
        return
    said: list[str] = []
    controller.sig_message.connect(said.append)
    try:
        run_dir = controller.start_config(config, [str(w) for w in warnings])
    finally:
        controller.sig_message.disconnect(said.append)
    if run_dir is None:
        # Nothing ran (no training environment yet, a run folder that cannot be made): the item waits again,
        # with why, and Start queue tries it once that is fixed; it is not spent as a failed run.
        queue.mark_pending(item.id, " ".join(said) or "could not start")
        queue.release_runner()
    else:
        controller._queue_item = item.id
        with contextlib.suppress(QueueError):  # the file held for a moment: the item is marked when the run ends
            queue.mark_running(item.id, run_dir)
    controller.sig_queue_changed.emit()
