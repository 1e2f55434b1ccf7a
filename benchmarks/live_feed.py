"""Feed 2,000 step events a second for 10 s to the live Train view; report the longest GUI stall.

A real process (tests/fixtures/fake_trainer.py) writes events.jsonl; the RunController
tails it at 20 Hz into TrainPlots and the header, exactly as during a training.

    QT_QPA_PLATFORM=offscreen python benchmarks/live_feed.py [--rate 2000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fixtures" / "fake_trainer.py"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from studio.core.config import TrainConfig
    from studio.gui.train_controller import RunController
    from studio.gui.train_header import RunHeader
    from studio.gui.train_plots import TrainPlots

    app = QApplication.instance() or QApplication([])
    steps = int(args.rate * args.seconds)
    controller = RunController(command_factory=lambda plan: [
        sys.executable, str(FAKE), str(plan.run_dir), "--steps", str(steps), "--rate", str(args.rate), "--ranks", "2"])
    plots, header = TrainPlots(live=False), RunHeader()
    plots.resize(1200, 800)
    plots.show()
    controller.sig_tick.connect(lambda: (plots.refresh(controller.model, stagger=True), header.refresh(controller.model)))
    clock = QElapsedTimer()
    gaps: list[int] = []
    last = [0]

    def beat() -> None:
        now = clock.elapsed()
        gaps.append(now - last[0])
        last[0] = now

    heartbeat = QTimer()
    heartbeat.setInterval(5)
    heartbeat.timeout.connect(beat)
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"}})
    with tempfile.TemporaryDirectory() as tmp:
        config.output.dir = str(Path(tmp) / "runs")
        controller.start_config(config, Path(tmp))
        clock.start()
        heartbeat.start()
        loop = QEventLoop()
        deadline = time.monotonic() + args.seconds + 30
        while controller.running and time.monotonic() < deadline:
            loop.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        heartbeat.stop()
        model = controller.model
        gaps.sort()
        print(f"events={model.event_count} loss_points={len(model.loss)} status={model.status} "
              f"max_gui_stall_ms={max(0, gaps[-1] - 5)} p99_gap_ms={gaps[int(len(gaps) * 0.99)]} "
              f"(target: max stall < 50 ms)")
        controller.shutdown()
    app.processEvents()


if __name__ == "__main__":
    main()
