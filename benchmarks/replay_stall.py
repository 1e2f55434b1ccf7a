"""How long a replay of 100,000 step events (2 ranks) holds the GUI thread, at most.

Opens the run through the RunController (the events read on its worker) into the Train
page's plots and, from the moment Open is pressed until every plot is drawn and painted,
measures two things with a 5 ms timer on the GUI thread:
- the longest gap between its beats (wall time: what a person sees, on this machine at its
  load; on a shared, overloaded machine the operating system's scheduling is part of it);
- the most CPU time the GUI thread itself spent between two beats (`time.thread_time`): the
  longest piece of work the window did at once, whatever else the machine is doing.

    QT_QPA_PLATFORM=offscreen python benchmarks/replay_stall.py [--events 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _settle(app: object, quiet_s: float = 0.6, limit_s: float = 5.0) -> None:
    from PySide6.QtCore import QEvent, QObject

    from studio.gui.base.event_loop import wait_for

    painted = [time.perf_counter()]

    class PaintWatch(QObject):
        def eventFilter(self, _obj: QObject, event: QEvent) -> bool:
            if event.type() == QEvent.Type.Paint:
                painted[0] = time.perf_counter()
            return False

    watch = PaintWatch()
    app.installEventFilter(watch)  # type: ignore[attr-defined]
    wait_for(lambda: time.perf_counter() - painted[0] > quiet_s, limit_s, interval_ms=20)
    app.removeEventFilter(watch)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    from benchmarks.event_replay import write_events
    from studio.gui.base.event_loop import wait_for
    from studio.gui.runner.run_controller import RunController
    from studio.gui.widgets.run_plots import RunPlots

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        write_events(run / "events.jsonl", args.events)
        stalls: list[float] = []
        work: list[float] = []
        walls: list[float] = []
        for _ in range(args.repeat):
            controller = RunController()
            plots = RunPlots(live=False)
            plots.resize(1200, 800)
            plots.show()
            # As the Train page does: each model change redraws the plots, one plot per tick.
            controller.sig_tick.connect(lambda c=controller, p=plots: p.refresh(c.model, stagger=True))
            # The window on screen, settled: its first paints go on for a few tenths of a second
            # (each plot painted, its axes measured, painted again), longer on a loaded machine;
            # a person opens a run on a window already shown, so wait for 0.6 s without a paint.
            _settle(app)
            clock = QElapsedTimer()
            clock.start()
            beats = {"last": 0.0, "max": 0.0, "cpu_last": time.thread_time(), "cpu_max": 0.0}

            def beat(beats: dict[str, float] = beats, clock: QElapsedTimer = clock) -> None:
                now, cpu = float(clock.elapsed()), time.thread_time()
                beats["max"] = max(beats["max"], now - beats["last"])
                beats["cpu_max"] = max(beats["cpu_max"], 1000 * (cpu - beats["cpu_last"]))
                beats["last"], beats["cpu_last"] = now, cpu

            heartbeat = QTimer(interval=5)
            heartbeat.timeout.connect(beat)
            beats["cpu_last"] = time.thread_time()
            heartbeat.start()
            began = time.perf_counter()
            source = controller.open_replay(run)
            assert source is not None
            wait_for(lambda s=source, p=plots: s.loaded and not p._stale() and not p._stagger.isActive(), 120,
                     interval_ms=5)
            wait_for(lambda: False, 0.1, interval_ms=5)  # the last paint
            heartbeat.stop()
            walls.append(time.perf_counter() - began)
            stalls.append(beats["max"])
            work.append(beats["cpu_max"])
            assert source.replay is not None and source.replay.events == args.events + 2
            points = plots.plot_points()
            plots.close()
            plots.deleteLater()
            controller.deleteLater()
            app.processEvents()
        print(f"events={args.events} plot_points={points} runs={len(stalls)} load_average={os.getloadavg()[0]:.1f}")
        print(f"longest GUI-thread work at once (CPU ms): median={statistics.median(work):.0f} "
              f"runs={', '.join(f'{w:.0f}' for w in work)} (target: < 50)")
        print(f"max gap between beats (wall ms): median={statistics.median(stalls):.0f} "
              f"runs={', '.join(f'{s:.0f}' for s in stalls)}; replay wall median {statistics.median(walls):.2f} s")


if __name__ == "__main__":
    main()
