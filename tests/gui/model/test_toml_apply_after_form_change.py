"""The TOML window left open with an edit while a setting is changed on the Model page: Apply writes the window's
text whole, so it asks first instead of silently undoing the change made on the page."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QPlainTextEdit, QPushButton

from studio.core.config.files.toml_file import load_config


def test_apply_asks_before_undoing_a_change_made_on_the_page(make_page, monkeypatch: pytest.MonkeyPatch) -> None:
    import studio.gui.model.toml_dialog as toml_dialog

    page = make_page()
    path = page.context.project.config_path
    dialog = page.show_toml()
    view = dialog.findChild(QPlainTextEdit, "toml_view")
    view.setPlainText(view.toPlainText() + "\n[training]\nseed = 9\n")  # edited in the window, not applied yet
    assert page.apply_config_changes({"method.rank": 32})  # meanwhile, on the page beside it
    assert load_config(path).method.rank == 32

    asked: list[str] = []
    answer = {"apply": False}
    monkeypatch.setattr(toml_dialog, "confirm",
                        lambda parent, title, text, action: asked.append(text) or answer["apply"])
    dialog.findChild(QPushButton, "toml_apply").click()
    assert len(asked) == 1 and "changed since" in asked[0]
    saved = load_config(path)
    assert saved.method.rank == 32 and saved.training.seed != 9  # nothing written: the person said no

    answer["apply"] = True
    dialog.findChild(QPushButton, "toml_apply").click()
    assert load_config(path).training.seed == 9  # the person chose the window's text, whole
    dialog.close()
