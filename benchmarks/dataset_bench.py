"""Dataset benchmark: 10,000 small captioned images; scan, first paint, scrolling, bulk trigger word, memory.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/dataset_bench.py [--images N] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def make_dataset(root: Path, count: int) -> None:
    from PIL import Image

    folder = root / "images"
    folder.mkdir(parents=True)
    for i in range(count):
        Image.new("RGB", (64, 48), (i % 256, (i * 7) % 256, (i * 13) % 256)).save(folder / f"img_{i:05d}.png")
        (folder / f"img_{i:05d}.txt").write_text(f"shape, color {i % 17}, size {i % 5}", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["STUDIO_CACHE_DIR"] = str(root / "cache")
        t = time.perf_counter()
        make_dataset(root, args.images)
        print(f"generated {args.images} images in {time.perf_counter() - t:.1f} s", file=sys.stderr)

        from studio.core.caption_ops import add_trigger
        from studio.core.captions import CaptionStore
        from studio.core.config import ConceptSection
        from studio.core.dataset import scan_concept

        scans, bulk = [], []
        for n in range(args.repeat):
            t = time.perf_counter()
            entries = scan_concept(ConceptSection(path=str(root / "images")))
            scans.append(time.perf_counter() - t)
            store = CaptionStore(entries)
            t = time.perf_counter()
            edits = add_trigger(store.captions(), f"trig{n}")
            store.apply(edits)
            report = store.flush()
            bulk.append(time.perf_counter() - t)
            assert len(report.saved) == args.images, report.errors[:1]

        import psutil
        from PySide6.QtCore import QSettings
        from PySide6.QtWidgets import QApplication

        from studio.core.project import create_project, default_config
        from studio.gui.context import StudioContext
        from studio.gui.pages.dataset import DatasetPage

        app = QApplication.instance() or QApplication([])
        project = create_project(root, default_config("images"))
        paints, stalls = [], []
        page = None
        for _ in range(args.repeat):
            context = StudioContext(QSettings(str(root / "s.ini"), QSettings.Format.IniFormat))
            page = DatasetPage(context)
            page.resize(1400, 900)
            page.show()
            context.set_project(project)
            page.wait_loaded(120, checked=False)
            paints.append(page.first_paint_ms or 0.0)
            # Scroll top to bottom one page at a time; the longest GUI-thread step is the stall.
            bar = page.view.verticalScrollBar()
            worst = 0.0
            value = 0
            while value <= bar.maximum():
                t = time.perf_counter()
                bar.setValue(value)
                page.view.viewport().repaint()
                app.processEvents()
                worst = max(worst, time.perf_counter() - t)
                value += bar.pageStep()
            stalls.append(worst * 1000)
            page.wait_loaded(300)
            if _ is not args.repeat - 1:
                page.shutdown()
                page.deleteLater()
                app.processEvents()
        rss = psutil.Process().memory_info().rss / 2**20
        assert page is not None
        facts = page.self_test(None)  # type: ignore[arg-type]
        page.shutdown()

    def med(values: list[float], scale: float = 1.0) -> str:
        return f"{statistics.median(values) * scale:.0f}"

    print(f"images: {args.images}")
    print(f"scan (captions read, no pixels): median {med(scans, 1000)} ms")
    print(f"add trigger word to all + save: median {med(bulk, 1000)} ms")
    print(f"first paint of the grid (scan + model + paint): median {med(paints)} ms")
    print(f"worst GUI-thread step while scrolling top to bottom: median {med(stalls)} ms")
    print(f"GUI process RSS after scrolling and checking: {rss:.0f} MB")
    print(f"self-test facts: {facts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
