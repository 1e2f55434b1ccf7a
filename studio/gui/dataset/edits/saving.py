"""Caption saving for the Dataset page: one batch at a time in a worker thread, conflicts asked on the GUI thread.

The store decides what to write (`begin_save`), a worker thread writes it (`SaveBatch.run`,
file-system calls only), and the GUI thread takes the result back (`finish_save`). Edits
made meanwhile stay pending and go with the next batch, so nothing typed is lost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QCheckBox, QMessageBox, QWidget

from studio.core import user_dirs
from studio.core.dataset.captions.caption_files import FileJob, SaveBatch
from studio.core.dataset.captions.caption_store import CaptionConflict, CaptionStore, SaveReport
from studio.core.files import atomic_write_text
from studio.core.text import plural
from studio.gui.base.event_loop import wait_for
from studio.gui.base.questions import confirm
from studio.gui.runner.worker import Worker

FINISH_SLICE = 1500  # saved captions taken back per event-loop turn (about 10 ms)


class CaptionSaver(QObject):
    """Runs the store's save batches off the GUI thread; `sig_report` follows each one."""

    sig_report = Signal(object)  # SaveReport, on the GUI thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker = Worker(self)
        self._running: tuple[CaptionStore, SaveBatch] | None = None
        self._again = False

    @property
    def busy(self) -> bool:
        return self._running is not None

    def save(self, store: CaptionStore) -> None:
        """Start writing the store's pending captions (or once more after the running batch)."""
        if self._running is not None:
            self._again = True
            return
        batch = store.begin_save()
        if not len(batch):
            return
        self._running = (store, batch)
        # The store must get its batch back even if writing broke unforeseen (that error is raised after).
        self.worker.run(batch.run, on_done=lambda _none: self._batch_done(batch),
                        on_failed=lambda _error: self._batch_done(batch))

    def wait(self, timeout_s: float = 120.0) -> None:
        """Let the running batch finish and be taken back (its report is emitted as usual)."""
        wait_for(lambda: self._running is None, timeout_s, user_input=False)

    def _batch_done(self, batch: SaveBatch) -> None:
        if self._running is None or self._running[1] is not batch:
            return
        self._finish_some(batch.jobs, SaveReport())

    def _finish_some(self, jobs: list[FileJob], report: SaveReport) -> None:
        """Take the batch back a slice per event-loop turn: 10,000 captions at once would freeze the grid."""
        assert self._running is not None
        store, batch = self._running
        store.finish_save(batch, jobs[:FINISH_SLICE], report)
        if len(jobs) > FINISH_SLICE:
            QTimer.singleShot(0, self, lambda: self._finish_some(jobs[FINISH_SLICE:], report))
            return
        self._running = None
        self.sig_report.emit(report)
        if self._again:
            self._again = False
            self.save(store)

    def shutdown(self) -> None:
        self.wait()
        self.worker.shutdown(10.0)


# The answers to a conflict; with ALL the same answer goes for the report's other conflicts, unasked.
MINE, DISK, ALL = "mine", "disk", " for all"


def ask_conflict(parent: QWidget, conflict: CaptionConflict, others: int = 0) -> str:
    """Ask which text to keep, showing both: "mine" or "disk", with " for all" when the person chose the same
    for the `others` conflicts still to ask about (a captioning job in another window changes thousands)."""
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle("Caption changed on disk")
    box.setText(conflict.describe())
    box.setInformativeText(f"Your text:\n{conflict.our_text}\n\nText on disk:\n{conflict.disk_text or '(deleted)'}")
    mine = box.addButton("Keep my text", QMessageBox.ButtonRole.AcceptRole)
    # Neither text is a "cancel": Escape or the title bar's cross would drop the person's typing unasked. With no
    # button of the reject role the box has no escape button, and waits for a choice.
    box.addButton("Use the text on disk", QMessageBox.ButtonRole.DestructiveRole)
    same: QCheckBox | None = None
    if others:
        same = QCheckBox(f"Do the same for the {plural(others, 'other caption')} changed on disk", box)
        box.setCheckBox(same)  # its parent and this reference keep it alive: the box does not own it for Python
    box.exec()
    answer = MINE if box.clickedButton() is mine else DISK
    return answer + ALL if same is not None and same.isChecked() else answer


def resolve_conflicts(store: CaptionStore, report: SaveReport, ask: Callable[[CaptionConflict, int], str],
                      changed: Callable[[list[Path]], None]) -> None:
    """Ask about each conflict of a report and apply the answer; new errors are added to the report."""
    chosen = ""
    for number, conflict in enumerate(report.conflicts):
        answer = chosen or ask(conflict, len(report.conflicts) - number - 1)
        if answer.endswith(ALL):
            chosen = answer
        if answer.startswith(MINE):
            report.errors.extend(store.keep_ours(conflict).errors)
        else:
            store.take_disk_text(conflict)
            changed([conflict.image])


def write_recovery(store: CaptionStore) -> tuple[Path, int]:
    """Captions that could not be saved go to a recovery file, so nothing typed is lost.

    The file lives in the user's data folder (never the cache, which may be wiped) and is
    written atomically, so a crash while writing it leaves no half file.
    """
    unsaved = {str(p): store.caption(p) for p in store.pending}
    folder = user_dirs.data_dir() / "recovery"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"unsaved-captions-{time.strftime('%Y%m%d-%H%M%S')}.json"
    atomic_write_text(path, json.dumps(unsaved, ensure_ascii=False, indent=1))
    return path, len(unsaved)


def keep_unsaved(store: CaptionStore, say: Callable[[str], None]) -> None:
    """The captions that could not be saved into a recovery file, and the person told where."""
    path, count = write_recovery(store)
    say(f"{plural(count, 'caption')} could not be saved; {'they are' if count != 1 else 'it is'} kept in {path}.")


def ask_close_unsaved(parent: QWidget, count: int, reason: str) -> bool:
    """The window closes with `count` captions that cannot be saved (`reason`): True closes with them in a recovery
    file, False keeps the studio open."""
    them = "them" if count != 1 else "it"
    return confirm(parent, "Captions not saved",
                   f"{plural(count, 'caption')} could not be saved: {reason}\n\nClose anyway, with {them} "
                   f"kept in a recovery file in {user_dirs.data_dir() / 'recovery'}? (Cancel: the studio stays "
                   f"open; once the cause is fixed, {them} {'are' if count != 1 else 'is'} saved with your next "
                   "edit.)", f"Close, keep {them} in a recovery file")
