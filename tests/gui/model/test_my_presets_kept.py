"""Save as my preset never loses a preset the person saved before: a title already used asks before its
settings are replaced, and another title that reads the same in a file name gets its own file."""

from __future__ import annotations

from PySide6.QtWidgets import QInputDialog, QMessageBox

from studio.core.config.files.presets import list_presets, save_user_preset


def test_a_second_title_in_another_script_keeps_the_first_preset(make_page) -> None:
    page = make_page()
    page.apply_config_changes({"method.rank": 8})
    first = page.save_preset("猫のLoRA")
    page.apply_config_changes({"method.rank": 32})
    second = page.save_preset("犬のLoRA")
    assert first.path != second.path and first.path.is_file()
    mine = {p.title: p.delta["method"]["rank"] for p in list_presets() if p.user}
    assert mine == {"猫のLoRA": 8, "犬のLoRA": 32}


def test_saving_under_a_title_already_used_asks_first(make_page, monkeypatch) -> None:
    page = make_page()
    page.apply_config_changes({"method.rank": 8})
    saved = save_user_preset("Portrait", page.config)
    before = saved.path.read_text()
    page.apply_config_changes({"method.rank": 32})
    asked: list[str] = []
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("Portrait ", True))
    monkeypatch.setattr(QMessageBox, "question",
                        lambda _parent, _title, text, *a: asked.append(text) or QMessageBox.StandardButton.No)
    page.ask_save_preset()
    assert "You have a preset titled 'Portrait'" in asked[0]
    assert saved.path.read_text() == before  # No: nothing is saved
    monkeypatch.setattr(QMessageBox, "question", lambda *a: QMessageBox.StandardButton.Yes)
    page.ask_save_preset()
    mine = [p for p in list_presets() if p.user]
    assert [(p.title, p.delta["method"]["rank"]) for p in mine] == [("Portrait", 32)]
