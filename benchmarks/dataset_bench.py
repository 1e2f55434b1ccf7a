"""Dataset benchmark: 10,000 small captioned images; scan, first paint, scrolling, bulk trigger word, memory.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/dataset_bench.py [--images N] [--repeat 3]

GUI-thread stalls are measured with a heartbeat: a 5 ms timer on the GUI thread notes the
longest gap between its ticks while a second timer scrolls the grid one page every 30 ms
from top to bottom (as a person dragging the scroll bar), right after the captions are
read, so the background check and the thumbnail helper are busy meanwhile.
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

HEARTBEAT_MS = 5
SCROLL_EVERY_MS = 30


def make_dataset(root: Path, count: int) -> None:
    from PIL import Image

    folder = root / "images"
    folder.mkdir(parents=True)
    for i in range(count):
        Image.new("RGB", (64, 48), (i % 256, (i * 7) % 256, (i * 13) % 256)).save(folder / f"img_{i:05d}.png")
        (folder / f"img_{i:05d}.txt").write_text(f"shape, color {i % 17}, size {i % 5}", encoding="utf-8")


class Heartbeat:
    """The longest time the GUI thread went without serving a 5 ms timer."""

    def __init__(self) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.worst = 0.0
        self._last = time.perf_counter()
        self.timer = QTimer(interval=HEARTBEAT_MS)
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.worst = max(self.worst, now - self._last)
        self._last = now

    def start(self) -> None:
        self.worst, self._last = 0.0, time.perf_counter()
        self.timer.start()

    def stop(self) -> float:
        self._tick()
        self.timer.stop()
        return self.worst * 1000


def run_until(condition: Any, timeout_s: float) -> bool:
    """Run the real event loop (as the app does, idle in Qt with the interpreter lock free) until `condition`."""
    from studio.gui.base.event_loop import wait_for

    return wait_for(condition, timeout_s)


def scroll_to_bottom(page: Any, beat: Heartbeat) -> tuple[float, float]:
    """(worst heartbeat gap, worst single scroll step) in ms while scrolling top to bottom."""
    from PySide6.QtCore import QTimer

    bar = page.view.verticalScrollBar()
    bar.setValue(0)
    steps: list[float] = []
    done = [False]

    def step() -> None:
        t = time.perf_counter()
        if bar.value() >= bar.maximum():
            done[0] = True
            return
        bar.setValue(bar.value() + bar.pageStep())
        page.view.viewport().repaint()
        steps.append(time.perf_counter() - t)

    timer = QTimer(interval=SCROLL_EVERY_MS)
    timer.timeout.connect(step)
    beat.start()
    timer.start()
    run_until(lambda: done[0], 600)
    timer.stop()
    return beat.stop(), max(steps) * 1000


def fs_floor(folder: Path, count: int) -> float:
    """The disk's share alone: replace `count` small files by create + write + rename, no sync, no Python logic."""
    folder.mkdir(exist_ok=True)
    names = [f"f{i:05d}.txt" for i in range(count)]
    for name in names:
        (folder / name).write_bytes(b"old")
    t = time.perf_counter()
    for name in names:
        fd = os.open(folder / f".{name}.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"new caption")
        os.close(fd)
        os.replace(folder / f".{name}.tmp", folder / name)
    return (time.perf_counter() - t) * 1000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    figures: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["STUDIO_CACHE_DIR"] = str(root / "cache")
        t = time.perf_counter()
        make_dataset(root, args.images)
        print(f"generated {args.images} images in {time.perf_counter() - t:.1f} s", file=sys.stderr)

        from studio.core.config.schema import ConceptSection
        from studio.core.dataset.captions.caption_ops import add_trigger
        from studio.core.dataset.captions.caption_store import CaptionStore
        from studio.core.dataset.scan import list_concept, read_captions

        for n in range(args.repeat):
            t = time.perf_counter()
            listing = list_concept(ConceptSection(path=str(root / "images")))
            note("list_ms", (time.perf_counter() - t) * 1000)
            entries = read_captions(listing).entries
            note("scan_ms", (time.perf_counter() - t) * 1000)
            store = CaptionStore(entries)
            t = time.perf_counter()
            store.apply(add_trigger(store.captions(), f"core{n}"))
            report = store.flush()
            note("core_bulk_save_ms", (time.perf_counter() - t) * 1000)
            assert len(report.saved) == args.images, report.errors[:1]

            note("fs_floor_ms", fs_floor(root / "floor", args.images))

        import psutil
        from PySide6.QtCore import QSettings
        from PySide6.QtWidgets import QApplication

        from studio.core.project.folder import create_project, default_config
        from studio.gui.context import StudioContext
        from studio.gui.dataset.page import DatasetPage

        app = QApplication.instance() or QApplication([])
        project = create_project(root, default_config("images"))
        beat = Heartbeat()
        page = None
        facts: dict[str, Any] = {}
        helpers_mb = 0.0
        for n in range(args.repeat):
            context = StudioContext(QSettings(str(root / "s.ini"), QSettings.Format.IniFormat))
            page = DatasetPage(context)
            page.resize(1400, 900)
            page.show()
            app.processEvents()
            context.set_project(project)
            assert run_until(lambda p=page: p.first_paint_ms is not None, 120)
            note("first_paint_ms", page.first_paint_ms or 0.0)
            assert page.wait_loaded(120, checked=False)
            note("captions_read_ms", (time.perf_counter() - page._started) * 1000)
            note("check_running_at_scroll_start", float(page._checking))
            gap, step = scroll_to_bottom(page, beat)
            note("scroll_gap_ms", gap)
            note("scroll_step_ms", step)
            assert page.wait_loaded(300)
            note("check_done_ms", (time.perf_counter() - page._started) * 1000)

            # "Add trigger word to all": the click (GUI thread), then the saves in the background
            # while the heartbeat watches the GUI thread.
            t = time.perf_counter()
            changed = page.apply_bulk("trigger", f"gui{n}")
            page.view.viewport().repaint()
            note("bulk_ui_ms", (time.perf_counter() - t) * 1000)
            store = page.store
            assert store is not None and changed == args.images
            beat.start()
            assert run_until(lambda s=store, p=page: not s.has_pending and not p.saver.busy, 600)
            note("bulk_saved_ms", (time.perf_counter() - t) * 1000)
            note("bulk_saving_gap_ms", beat.stop())
            on_disk = (root / "images" / "img_00042.txt").read_text(encoding="utf-8")
            assert on_disk.startswith(f"gui{n}, "), on_disk
            me = psutil.Process()
            note("gui_rss_mb", me.memory_info().rss / 2**20)
            helpers_mb = max(helpers_mb, sum(c.memory_info().rss for c in me.children(recursive=True)) / 2**20)
            if n == args.repeat - 1:
                facts = page.self_test(None)  # type: ignore[arg-type]
            page.shutdown()
            page.deleteLater()
            app.processEvents()

    print(f"images: {args.images}, runs: {args.repeat} (medians; all runs in brackets)")
    for name, values in figures.items():
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name}: {statistics.median(values):.0f}  [{runs}]")
    print(f"helper processes RSS (largest seen): {helpers_mb:.0f} MB")
    print(f"self-test facts: {facts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
