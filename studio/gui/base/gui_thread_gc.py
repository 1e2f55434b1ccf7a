"""Python's cycle collector runs on the GUI thread only.

Left on its own, the collector runs in whichever thread happens to allocate when a generation
fills up: often a Worker's pool thread reading the disk or installing the training environment.
Collecting there destroys Qt objects that were part of reference cycles (a QProcess whose
signals hold lambdas over its owner, a closed dialog) from the wrong thread. Qt then touches the
GUI thread's socket notifiers from the pool thread ("Socket notifiers cannot be enabled or
disabled from another thread") and the heap is corrupted: the app aborts minutes later, at random.

So the automatic collector is switched off and a timer on the GUI thread collects instead,
generation by generation, with the interpreter's own thresholds (as calibre does). Reference
counting still frees everything that is not in a cycle at once, on every thread.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

INTERVAL_MS = 500


class GuiThreadCollector(QObject):
    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.setObjectName("gui_thread_collector")
        self.thresholds = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.setInterval(INTERVAL_MS)
        self.timer.timeout.connect(self.collect)
        self.timer.start()

    def collect(self) -> None:
        """What the interpreter would have collected by now, on this (the GUI) thread."""
        young, middle, old = gc.get_count()
        t0, t1, t2 = self.thresholds
        if young <= t0:
            return
        generation = 0
        if middle > t1:
            generation = 2 if old > t2 else 1
        gc.collect(generation)


def install_gui_thread_gc(app: QCoreApplication) -> GuiThreadCollector:
    """Collect cycles only on `app`'s thread from now on (once per application)."""
    existing = app.findChild(GuiThreadCollector, "gui_thread_collector")
    if isinstance(existing, GuiThreadCollector):
        return existing
    return GuiThreadCollector(app)
