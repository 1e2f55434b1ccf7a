"""Replay 100,000 step events (2 ranks) into the Train page's plots, to the first paint.

Prints the medians of several runs, wall and CPU time, split into reading (events.jsonl
to RunModel) and drawing (setData on every curve and the first paint).

    QT_QPA_PLATFORM=offscreen python benchmarks/event_replay.py [--events 100000] [--repeat 5]
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
    from studio.core.runs.events import RankMemory, RunFinished, RunStarted, Step

    with open(path, "w", encoding="utf-8") as handle:
        handle.write(RunStarted(config={}, world_size=2, total_steps=count, devices=["cuda:0", "cuda:1"],
                                time=1000.0).to_json())
        handle.write("\n")
        for i in range(1, count + 1):
            mem = [RankMemory(rank=r, device=f"cuda:{r}", allocated_mb=9000.0 + i % 50, reserved_mb=10000.0,
                              peak_mb=11000.0) for r in range(2)]
            handle.write(Step(step=i, epoch=1, loss=0.1 + (i % 7) / 100, lr=1e-4, samples_per_s=12.0,
                              eta_s=5.0, memory=mem, time=1000.0 + i / 10).to_json() + "\n")
        handle.write(RunFinished(status="completed", step=count, time=1000.0 + count / 10).to_json() + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from PySide6.QtWidgets import QApplication

    from studio.core.runs.records.run_model import replay_run
    from studio.gui.widgets.run_plots import RunPlots

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        write_events(run / "events.jsonl", args.events)
        size_mb = (run / "events.jsonl").stat().st_size / 2**20
        rows: list[dict[str, float]] = []
        for _ in range(args.repeat):
            plots = RunPlots(live=False)
            plots.resize(1200, 800)
            plots.show()
            app.processEvents()  # an empty window on screen, as on the Runs page
            wall0, cpu0 = time.perf_counter(), time.process_time()
            rep = replay_run(run)
            wall1, cpu1 = time.perf_counter(), time.process_time()
            plots.refresh(rep.model)
            app.processEvents()  # the first paint
            wall2, cpu2 = time.perf_counter(), time.process_time()
            rows.append({"read_wall": wall1 - wall0, "read_cpu": cpu1 - cpu0, "draw_wall": wall2 - wall1,
                         "draw_cpu": cpu2 - cpu1, "total_wall": wall2 - wall0, "total_cpu": cpu2 - cpu0})
            points = plots.plot_points()
            plots.close()
            plots.deleteLater()
            app.processEvents()
        med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        print(f"events={rep.events} file_mb={size_mb:.1f} plot_points={points} runs={len(rows)} "
              f"load_average={os.getloadavg()[0]:.1f}")
        print("medians (s): " + " ".join(f"{k}={v:.3f}" for k, v in med.items()) + " (target: total < 2 s)")


if __name__ == "__main__":
    main()
