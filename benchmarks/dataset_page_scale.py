"""The Dataset page at 20,000 images: what each thing a person does costs the GUI thread.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/dataset_page_scale.py [--images 20000] [--repeat 3]

The dataset is generated once in a temporary folder: tiny PNGs, each with a caption of 20 tags drawn from
3,000 (a tagger's output), and one 7000 x 7000 PNG (49 megapixels, under the preview's limit), then Caption with…'s review holding a
proposal for each. Every figure
is the GUI thread's time for the action, event processing after it included (the repaint of the grid);
keystrokes are typed one character at a time and their median and worst are noted. Figures are medians of
`--repeat` runs, each on a fresh page (the check and the thumbnails finished first, so they do not
compete). Run it from another checkout with PYTHONPATH to measure that checkout's page with the same script.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HUGE = "huge_7000.png"
TYPED = "long hair"


def make_dataset(folder: Path, count: int) -> None:
    from PIL import Image

    folder.mkdir(parents=True)
    rng = random.Random(0)
    vocab = [f"tag{i}" for i in range(3000)] + ["1girl", "solo", "long hair", "smile", "outdoors", "red dress"]
    tiny = Image.new("RGB", (16, 12), (10, 20, 30))
    for i in range(count):
        tiny.save(folder / f"img_{i:05d}.png")
        (folder / f"img_{i:05d}.txt").write_text(", ".join(rng.sample(vocab, 20)), encoding="utf-8")
    gradient = Image.linear_gradient("L").resize((7000, 7000))
    Image.merge("RGB", (gradient, gradient.transpose(Image.Transpose.ROTATE_90), gradient)).save(folder / HUGE)
    (folder / HUGE).with_suffix(".txt").write_text("long hair, huge", encoding="utf-8")


def gui_ms(app: Any, action: Callable[[], object]) -> float:
    t = time.perf_counter()
    action()
    app.processEvents()
    return (time.perf_counter() - t) * 1000


def typing_ms(app: Any, field: Any, text: str) -> list[float]:
    """Each keystroke of `text` typed into `field` (a QLineEdit), then the field cleared."""
    times = [gui_ms(app, lambda n=n: field.setText(text[:n])) for n in range(1, len(text) + 1)]
    field.setText("")
    app.processEvents()
    return times


def worked_out(app: Any, dialog: Any, action: Callable[[], object]) -> tuple[float, float, float]:
    """(GUI thread's time for `action`, ms until the bulk dialog's count shows, the longest gap between 5 ms beats
    meanwhile): a checkout that works the edits out on the GUI thread shows the count at once, its gap the whole."""
    from PySide6.QtCore import QTimer

    counting = getattr(dialog, "counting", lambda: False)
    beats = [time.perf_counter()]
    timer = QTimer(interval=5)
    timer.timeout.connect(lambda: beats.append(time.perf_counter()))
    timer.start()
    t = time.perf_counter()
    gui = gui_ms(app, action)
    while counting():
        app.processEvents()
        time.sleep(0.001)
    shown = (time.perf_counter() - t) * 1000
    app.processEvents()
    timer.stop()
    beats.append(time.perf_counter())
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    return gui, shown, max(gaps) * 1000


def one_run(app: Any, project: Any, root: Path, note: Callable[[str, float], None]) -> None:
    from PySide6.QtCore import QSettings

    from studio.gui.base.event_loop import wait_for
    from studio.gui.context import StudioContext
    from studio.gui.dataset.edits.bulk import BulkDialog
    from studio.gui.dataset.page import DatasetPage

    context = StudioContext(QSettings(str(root / "s.ini"), QSettings.Format.IniFormat))
    page = DatasetPage(context)
    page.resize(1400, 900)
    page.show()
    app.processEvents()
    context.set_project(project)
    assert page.wait_loaded(600), "the dataset was not read and checked in 10 minutes"
    wait_for(lambda: not page.loader.busy, 60)
    waiting = getattr(page.editor, "wait_preview", lambda: True)  # checkouts whose preview is made at once

    for name, field in (("tag_filter", page.filter_tag), ("text_filter", page.filter_text)):
        keys = typing_ms(app, field, TYPED)
        note(f"{name}_key_median_ms", statistics.median(keys))
        note(f"{name}_key_worst_ms", max(keys))
    note("select_all_ms", gui_ms(app, page.view.selectAll))
    note("selected_entries_ms", gui_ms(app, page.selected_entries))
    page.view.setCurrentIndex(page.model.index(0))
    waiting()
    note("next_image_ms", statistics.median(gui_ms(app, lambda: page.step(1)) for _ in range(5)))
    huge = Path(page.model.paths[0]).parent / HUGE
    t = time.perf_counter()
    note("huge_preview_gui_ms", gui_ms(app, lambda: page.select_path(huge)))
    waiting()
    note("huge_preview_shown_ms", (time.perf_counter() - t) * 1000)
    assert not page.editor.preview.pixmap().isNull()

    dialog = None

    def open_dialog() -> None:
        nonlocal dialog
        dialog = BulkDialog(page.tools.scopes(), page)
        dialog.select("replace", scope="All images")

    note("bulk_dialog_open_ms", gui_ms(app, open_dialog))
    assert dialog is not None
    while getattr(dialog, "counting", lambda: False)():
        app.processEvents()
    keys = typing_ms(app, dialog.first, "tag12")
    note("bulk_replace_key_median_ms", statistics.median(keys))
    note("bulk_replace_key_worst_ms", max(keys))
    dialog.first.setText("tag12")
    gui, shown, gap = worked_out(app, dialog, lambda: dialog.case.setChecked(False))  # at once, as after a pause
    note("bulk_replace_recount_ms", gui)
    note("bulk_replace_recount_shown_ms", shown)
    note("bulk_replace_recount_worst_gap_ms", gap)
    dialog.select("trigger", scope="All images")
    while getattr(dialog, "counting", lambda: False)():
        app.processEvents()
    dialog.first.setText("sks")
    gui, shown, gap = worked_out(app, dialog, dialog._update)  # what the pause after typing starts
    note("bulk_trigger_count_ms", gui)
    note("bulk_trigger_count_shown_ms", shown)
    note("bulk_trigger_count_worst_gap_ms", gap)
    dialog.deleteLater()
    note("trigger_all_ms", gui_ms(app, lambda: page.apply_bulk("trigger", "sks")))
    note("undo_all_ms", gui_ms(app, page.undo_stack.undo))
    review_run(app, page, note)
    page.shutdown()
    page.deleteLater()
    app.processEvents()


def review_run(app: Any, page: Any, note: Callable[[str, float], None]) -> None:
    """Caption with…'s review holding a proposal for every image: a rule changed (the first event-loop turn of
    the table following it), then Reject all."""
    from studio.core.dataset.captions.auto_caption import MachineCaption, ScoredTag
    from studio.gui.dataset.captions.review import CaptionReviewDialog

    dialog = CaptionReviewDialog(page.store, [], page.push_edits, page.context, page)
    for image in list(page.store.entries):
        dialog.add_proposal(MachineCaption(image, tags=(ScoredTag("outdoors", 0.9), ScoredTag("cat", 0.4))))
    app.processEvents()
    dialog.prefix.setText("sks")
    dialog._table_timer.stop()
    note("review_rule_changed_ms", gui_ms(app, dialog._refill_table))  # what the pause after typing starts
    note("review_reject_all_ms", gui_ms(app, lambda: dialog.reject_rows(range(len(dialog.rows)))))
    dialog.close()
    dialog.deleteLater()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=20_000)
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
        make_dataset(root / "images", args.images)
        print(f"generated {args.images} images in {time.perf_counter() - t:.1f} s", file=sys.stderr)

        from PySide6.QtWidgets import QApplication

        from studio.core.project.folder import create_project, default_config

        app = QApplication.instance() or QApplication([])
        project = create_project(root / "project", default_config(str(root / "images")))
        for _ in range(args.repeat):
            one_run(app, project, root, note)

    load = os.getloadavg()[0]
    print(f"images: {args.images + 1}, runs: {args.repeat}, load average {load:.1f} (medians; all runs in brackets)")
    for name, values in figures.items():
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name}: {statistics.median(values):.0f}  [{runs}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
