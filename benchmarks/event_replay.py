"""Replay 100,000 step events into the Train page's plots; prints seconds (median of runs).

    QT_QPA_PLATFORM=offscreen python benchmarks/event_replay.py [--events 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def write_events(path: Path, count: int) -> None:
    from studio.core.events import RankMemory, RunStarted, Step

    with open(path, "w", encoding="utf-8") as handle:
        handle.write(RunStarted(config={}, world_size=2, total_steps=count, devices=["cuda:0", "cuda:1"]).to_json())
        handle.write("\n")
        for i in range(1, count + 1):
            mem = [RankMemory(rank=r, device=f"cuda:{r}", allocated_mb=9000.0 + i % 50, reserved_mb=10000.0,
                              peak_mb=11000.0) for r in range(2)]
            handle.write(Step(step=i, epoch=1, loss=0.1 + (i % 7) / 100, lr=1e-4, samples_per_s=12.0,
                              eta_s=5.0, memory=mem, time=1000.0 + i / 10).to_json() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from PySide6.QtWidgets import QApplication

    from studio.core.event_reader import replay_run
    from studio.gui.train_plots import TrainPlots

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        write_events(run / "events.jsonl", args.events)
        read_s: list[float] = []
        total_s: list[float] = []
        cpu_s: list[float] = []
        for _ in range(args.repeat):
            plots = TrainPlots(live=False)
            plots.resize(1200, 800)
            plots.show()
            start, cpu0 = time.perf_counter(), time.process_time()
            rep = replay_run(run)
            mid = time.perf_counter()
            plots.refresh(rep.model)
            app.processEvents()  # the first paint
            end = time.perf_counter()
            cpu_s.append(time.process_time() - cpu0)
            read_s.append(mid - start)
            total_s.append(end - start)
            points = plots.plot_points()
            plots.close()
            plots.deleteLater()
        print(f"events={rep.events} plot_points={points} read_median_s={statistics.median(read_s):.3f} "
              f"replay_to_paint_median_s={statistics.median(total_s):.3f} cpu_median_s={statistics.median(cpu_s):.3f} "
              "(target < 2 s)")


if __name__ == "__main__":
    main()
