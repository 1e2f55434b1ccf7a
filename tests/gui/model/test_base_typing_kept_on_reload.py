"""studio.toml changed by another program while a person types a base model on the Model page: the typing
stays, the file's base is said under it, and Enter saves the typed base with the other change."""

from __future__ import annotations

from PySide6.QtCore import Qt

from studio.core.config.files.toml_file import load_config


def test_a_base_being_typed_survives_the_file_read_again(make_page, qtbot) -> None:
    page = make_page()
    path = page.context.project.config_path
    page.base.selectAll()
    qtbot.keyClicks(page.base, "models/my-own-sd15")  # not finished: no Enter yet

    path.write_text(path.read_text() + "\n[training]\nmax_steps = 77\n")
    assert page.context.watcher.check()
    assert page.config.training.max_steps == 77
    assert page.base.text() == "models/my-own-sd15"

    qtbot.keyClick(page.base, Qt.Key.Key_Return)
    saved = load_config(path)
    assert saved.model.base == "models/my-own-sd15" and saved.training.max_steps == 77


def test_a_base_changed_on_disk_while_typing_is_said(make_page, qtbot) -> None:
    page = make_page()
    path = page.context.project.config_path
    page.base.selectAll()
    qtbot.keyClicks(page.base, "models/my-own-sd15")

    text = path.read_text()
    old = page.config.model.base
    path.write_text(text.replace(f'base = "{old}"', 'base = "models/theirs"'))
    assert page.context.watcher.check()
    assert page.config.model.base == "models/theirs"
    assert page.base.text() == "models/my-own-sd15"
    assert "studio.toml was changed on disk and says models/theirs" in page.base_status.text()

    qtbot.keyClick(page.base, Qt.Key.Key_Return)
    assert load_config(path).model.base == "models/my-own-sd15"
    assert "changed on disk" not in page.base_status.text()


def test_a_base_not_being_typed_in_shows_the_file(make_page) -> None:
    page = make_page()
    path = page.context.project.config_path
    old = page.config.model.base
    path.write_text(path.read_text().replace(f'base = "{old}"', 'base = "models/theirs"'))
    assert page.context.watcher.check()
    assert page.base.text() == "models/theirs"
