"""The Train page's self-test (`--self-test`, the frozen app's checks): a run replayed into its plots, and the
demo trained through the real process path with the GUI's stalls measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QElapsedTimer, QTimer

from studio.gui.base.event_loop import wait_for
from studio.gui.base.selftest_options import SelfTestOptions

DEMO_TIMEOUT_S = 900.0
REPLAY_TIMEOUT_S = 120.0  # the self-test's replay, read on the controller's worker
SETTLE_S = 0.5  # the page's first paint, before Train is pressed


def page_self_test(page: Any, options: SelfTestOptions) -> dict[str, Any]:
    """`page`: the Train page (page.py, which calls this; not imported here, so the two make no loop)."""
    result: dict[str, Any] = {}
    if options.replay is not None:
        source = page.controller.open_replay(Path(options.replay))
        if source is None or not wait_for(lambda: source.loaded, REPLAY_TIMEOUT_S) or source.replay is None:
            raise RuntimeError(f"could not replay {options.replay}")
        page._refresh()
        result.update(replay_events=source.replay.events, plot_points=page.plots.plot_points())
    if options.train_demo:
        result.update(_train_demo(page))
    return result

def _train_demo(page: Any) -> dict[str, Any]:
    """Train the project's config through the real QProcess path; measure GUI stalls."""
    clock = QElapsedTimer()
    clock.start()
    stalls = {"max": 0, "last": 0}

    def beat() -> None:
        now = clock.elapsed()
        stalls["max"] = max(stalls["max"], now - stalls["last"])
        stalls["last"] = now

    heartbeat = QTimer(page)
    heartbeat.setInterval(10)
    heartbeat.timeout.connect(beat)
    # The page was only just shown: its first paint (four empty plots, 50-150 ms here) is
    # not part of training. A person presses Train on a page that is already on screen.
    wait_for(lambda: False, SETTLE_S, interval_ms=50)
    stalls["last"] = clock.elapsed()
    heartbeat.start()  # from the press of Train: the checks and the launch count too
    if not page.start_training():
        heartbeat.stop()
        raise RuntimeError(f"the demo training did not start: {page.message.text()}")
    finished = wait_for(lambda: not page.controller.running, DEMO_TIMEOUT_S, interval_ms=50)
    heartbeat.stop()
    heartbeat.deleteLater()
    if not finished:
        page.controller.kill_now()
        raise RuntimeError(f"the demo training did not finish within {DEMO_TIMEOUT_S:.0f} s")
    model = page.controller.model
    return {
        "events": model.event_count,
        "loss_points": len(model.loss),
        "memory_points": model.memory_points(),
        "samples": len(model.samples),
        "status": model.status,
        "outputs": [str(model.resolve(o)) for o in model.outputs],
        # The heartbeat ticks every 10 ms: a longer gap is time the GUI did not run.
        "max_gui_stall_ms": max(0, stalls["max"] - 10),
    }
