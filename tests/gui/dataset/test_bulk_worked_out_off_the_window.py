"""The bulk dialog works its edits out on a worker thread: over 20,000 captions that took up to a second and a
half on the GUI thread, the window frozen once typing paused. OK pressed meanwhile closes it once they are ready."""

from __future__ import annotations

import threading

import pytest

from studio.gui.dataset.page import DatasetPage

HELD_S = 5.0  # a dialog that works the edits out on the GUI thread is held this long, then the test fails


def test_the_window_answers_while_the_edits_are_worked_out(
        qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from studio.core.dataset.captions import caption_ops
    from studio.gui.dataset.edits.bulk import BulkDialog

    dialog = BulkDialog(page.tools.scopes(), page)
    dialog.select("trigger", scope="All images")
    qtbot.waitUntil(lambda: not dialog.counting(), timeout=5000)
    working, release = threading.Event(), threading.Event()
    add_trigger = caption_ops.add_trigger

    def held(captions, word):  # type: ignore[no-untyped-def]
        working.set()
        release.wait(HELD_S)
        return add_trigger(captions, word)

    monkeypatch.setattr(caption_ops, "add_trigger", held)
    qtbot.keyClicks(dialog.first, "sks")
    qtbot.waitUntil(working.is_set, timeout=5000)  # the pause is over: the edits are being worked out

    assert dialog.preview.text() == "Working out the edits…"
    qtbot.keyClicks(dialog.first, "x")  # the person goes on typing
    assert dialog.first.text() == "sksx"
    dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
    assert dialog.result() != dialog.DialogCode.Accepted
    release.set()
    qtbot.waitUntil(lambda: dialog.result() == dialog.DialogCode.Accepted, timeout=10000)
    assert len(dialog.edits) == 4 and {edit.after.split(", ")[0] for edit in dialog.edits} == {"sksx"}
    assert dialog.preview.text() == "4 of 4 captions will change."
    dialog.deleteLater()
