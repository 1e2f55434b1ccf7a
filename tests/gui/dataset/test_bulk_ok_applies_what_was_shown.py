"""OK pressed in the bulk dialog while its edits are still worked out applies what the fields said when OK was
pressed: the fields wait, so a later change cannot slip another text into the captions."""

from __future__ import annotations

import pytest

from studio.gui.dataset.page import DatasetPage
from tests.gui.dataset.conftest import trigger_dialog_held


def test_ok_applies_the_text_confirmed(qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    dialog, working, release = trigger_dialog_held(qtbot, page, monkeypatch)
    qtbot.keyClicks(dialog.first, "sks")
    dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
    qtbot.waitUntil(working.is_set, timeout=5000)
    qtbot.keyClicks(dialog.first, "x")  # a key pressed after OK, before the edits are ready
    qtbot.waitUntil(lambda: not dialog._typing.isActive(), timeout=5000)  # and the typing pause is over
    release.set()
    qtbot.waitUntil(lambda: dialog.result() == dialog.DialogCode.Accepted, timeout=10000)
    assert {edit.after.split(", ")[0] for edit in dialog.edits} == {"sks"}
    dialog.deleteLater()


def test_a_refused_ok_gives_the_fields_back(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    from studio.gui.dataset.edits.bulk import BulkDialog

    dialog = BulkDialog(page.tools.scopes(), page)
    dialog.select("replace", first="(", scope="All images")
    dialog.regex.setChecked(True)
    dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: not dialog.counting(), timeout=5000)
    assert dialog.preview.text().startswith("Cannot apply:")
    assert dialog.first.isEnabled() and dialog.regex.isEnabled() and dialog.operation.isEnabled()
    dialog.deleteLater()
