"""Feed 2,000 step events a second for 10 s to the live Train view; report the longest GUI stall.

A real process (tests/fixtures/fake_trainer.py, 2 ranks) writes events.jsonl; the
RunController tails it at 20 Hz into RunPlots and the header, exactly as during a
training. A 5 ms heartbeat timer measures how long the GUI thread went without running
its event loop. The machine's load average is printed too: on a shared machine the
scheduler's own pauses show up as stalls.

    QT_QPA_PLATFORM=offscreen python benchmarks/live_feed.py [--rate 2000] [--seconds 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fixtures" / "fake_trainer.py"
HEARTBEAT_MS = 5


def feed_once(rate: int, seconds: float) -> dict[str, Any]:
    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer

    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.schema import TrainConfig
    from studio.gui.runner.run_controller import RunController
    from studio.gui.widgets.run_header import RunHeader
    from studio.gui.widgets.run_plots import RunPlots

    steps = int(rate * seconds)
    controller = RunController(command_factory=lambda plan: [
        sys.executable, str(FAKE), str(plan.run_dir), "--steps", str(steps), "--rate", str(rate), "--ranks", "2"])
    plots, header = RunPlots(live=False), RunHeader()
    plots.resize(1200, 800)
    plots.show()
    controller.sig_tick.connect(lambda: (plots.refresh(controller.model, stagger=controller.running),
                                         header.refresh(controller.model)))
    loop = QEventLoop()
    settle = time.monotonic() + 0.5  # the window is on screen before the person presses Train
    while time.monotonic() < settle:
        loop.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
    clock = QElapsedTimer()
    gaps: list[int] = []
    last = [0]

    def beat() -> None:
        now = clock.elapsed()
        gaps.append(now - last[0])
        last[0] = now

    heartbeat = QTimer()
    heartbeat.setInterval(HEARTBEAT_MS)
    heartbeat.timeout.connect(beat)
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"}})
    with tempfile.TemporaryDirectory() as tmp:
        config.output.dir = str(Path(tmp) / "runs")
        cpu0 = time.process_time()
        controller.start_config(resolve_paths(config, Path(tmp)))
        clock.start()
        heartbeat.start()
        deadline = time.monotonic() + seconds + 30
        while controller.running and time.monotonic() < deadline:
            # Sleeps until the next event (the heartbeat wakes it every 5 ms): no busy loop.
            loop.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
        heartbeat.stop()
        cpu = time.process_time() - cpu0
        wall = clock.elapsed() / 1000
        model = controller.model
        gaps.sort()
        result = {
            "events": model.event_count, "loss_points": len(model.loss), "status": model.status,
            "max_gui_stall_ms": max(0, gaps[-1] - HEARTBEAT_MS),
            "p99_gap_ms": gaps[int(len(gaps) * 0.99)],
            "gaps_over_50ms": sum(1 for g in gaps if g - HEARTBEAT_MS > 50),
            "gui_cpu_share": round(cpu / wall, 2),
            "load_average": round(os.getloadavg()[0], 1),
        }
        controller.shutdown()
    plots.close()
    header.close()
    plots.deleteLater()
    header.deleteLater()
    controller.deleteLater()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    runs = []
    for _ in range(args.repeat):
        runs.append(feed_once(args.rate, args.seconds))
        app.processEvents()
        print(runs[-1], flush=True)
    print(f"median of {len(runs)}: max_gui_stall_ms={statistics.median(r['max_gui_stall_ms'] for r in runs)} "
          f"p99_gap_ms={statistics.median(r['p99_gap_ms'] for r in runs)} "
          f"gui_cpu_share={statistics.median(r['gui_cpu_share'] for r in runs)} (target: max stall < 50 ms)")


if __name__ == "__main__":
    main()
