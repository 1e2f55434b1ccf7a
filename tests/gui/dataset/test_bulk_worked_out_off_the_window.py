"""The bulk dialog works its edits out on a worker thread: over 20,000 captions that took up to a second and a
half on the GUI thread, the window frozen once typing paused. OK pressed meanwhile closes it once they are ready."""

from __future__ import annotations

import pytest

from studio.gui.dataset.page import DatasetPage
from tests.gui.dataset.conftest import trigger_dialog_held


def test_the_window_answers_while_the_edits_are_worked_out(
        qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    dialog, working, release = trigger_dialog_held(qtbot, page, monkeypatch)
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
