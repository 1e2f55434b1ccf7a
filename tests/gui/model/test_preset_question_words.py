"""The question before a preset replaces settings names where they may have been changed: a value typed into
studio.toml by hand (or in the TOML window) was not set on the Model page, and the question does not say it was."""

from __future__ import annotations

import pytest

from studio.core.config.files.presets import get_preset


def test_a_value_changed_in_studio_toml_is_not_said_to_be_set_here(make_page, monkeypatch: pytest.MonkeyPatch) -> None:
    import studio.gui.model.preset_question as question

    page = make_page()
    path = page.context.project.config_path
    path.write_text(path.read_text() + "\n[method]\nrank = 64\n")
    assert page.context.watcher.check() and page.config.method.rank == 64
    asked: list[str] = []
    monkeypatch.setattr(question, "confirm", lambda parent, title, text, action: asked.append(text) or False)

    page.choose_preset(get_preset("sd15-lora-6gb"))
    assert len(asked) == 1 and "rank: 64 → 16" in asked[0]
    assert "you set here" not in asked[0]
    assert "in studio.toml" in asked[0] and "on this page" in asked[0]
    assert page.config.method.rank == 64
