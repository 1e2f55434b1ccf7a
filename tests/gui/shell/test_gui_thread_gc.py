"""The app's cycle collector runs on the GUI thread only: a pool thread that allocates never
destroys the window's objects (a QProcess destroyed there corrupted the heap and aborted the app)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fixtures.waits import scaled_s

ROOT = Path(__file__).resolve().parents[3]

# Run in a fresh interpreter: the test session's own QApplication already has the collector.
SCRIPT = r"""
import gc, threading
from studio.gui.shell.application import make_application
from studio.gui.base.event_loop import wait_for

app = make_application()
where = []

class Owner:
    def __init__(self):
        self.me = self  # a reference cycle, as a QProcess and the lambdas on its signals make
    def __del__(self):
        where.append("gui" if threading.current_thread() is threading.main_thread() else "pool")

Owner()  # garbage now; only the cycle collector can free it

def allocate():  # what a pool thread reading or installing does: many new containers
    for _ in range(200_000):
        box = []
        box.append(box)

thread = threading.Thread(target=allocate)
thread.start()
thread.join()
wait_for(lambda: bool(where), timeout_s=20)
print("collector enabled in the interpreter:", gc.isenabled())
print("freed on:", where)
"""


def test_a_cycle_made_on_the_gui_thread_is_freed_there_not_in_a_pool_thread(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT,
                          timeout=scaled_s(120))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "collector enabled in the interpreter: False" in done.stdout
    assert "freed on: ['gui']" in done.stdout, done.stdout
