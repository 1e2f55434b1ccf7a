"""Reload pressed while a bulk edit's captions are still being written: the window takes typing meanwhile (it
held every key and click until the files were written), and what is typed then is saved before the dataset is
read again."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import Qt

from studio.core.dataset.captions.caption_files import SaveBatch
from studio.gui.dataset.page import DatasetPage

HELD_S = 5.0  # a page that waits for the save itself is held this long, then the test fails


def test_reload_waits_for_the_save_without_holding_the_window(
        qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    folder = page.context.project.root / "images"
    writing, release = threading.Event(), threading.Event()
    run = SaveBatch.run

    def held(batch: SaveBatch) -> None:
        writing.set()
        release.wait(HELD_S)
        run(batch)

    monkeypatch.setattr(SaveBatch, "run", held)
    generation = page._generation
    page.apply_bulk("trigger", "sks")
    qtbot.waitUntil(writing.is_set, timeout=5000)

    qtbot.mouseClick(page.toolbar.reload_button, Qt.MouseButton.LeftButton)
    assert page._generation == generation  # not read again yet: the save is still writing
    assert "Saving captions" in page.status_label.text() and page.busy()
    page.editor.text.selectAll()
    qtbot.keyClicks(page.editor.text, "typed while saving")  # taken, not held back
    assert page.editor.text.toPlainText() == "typed while saving"

    release.set()
    assert page.wait_loaded(30)
    assert page._generation == generation + 1
    assert (folder / "a.txt").read_text(encoding="utf-8") == "typed while saving"
    assert (folder / "b.txt").read_text(encoding="utf-8") == "sks, blue, circle"
    assert page.store is not None and page.store.caption(folder / "a.png") == "typed while saving"
