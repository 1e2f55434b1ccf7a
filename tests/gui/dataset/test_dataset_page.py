from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from studio.core.dataset.captions.caption_store import CaptionConflict
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.dataset.page import DatasetPage


def images(page: DatasetPage) -> Path:
    assert page.context.project is not None
    return page.context.project.root / "images"


def type_caption(qtbot, page: DatasetPage, text: str) -> None:  # type: ignore[no-untyped-def]
    page.editor.text.selectAll()
    qtbot.keyClicks(page.editor.text, text)


def test_grid_shows_dataset_and_self_test(page: DatasetPage) -> None:
    assert page.model.rowCount() == 4
    assert page.model.data(page.model.index(0)) == "a.png"
    facts = page.self_test(SelfTestOptions())
    assert facts["dataset_images"] == 4
    assert 0 < facts["dataset_first_paint_ms"] < 5000
    # 96x64 is under 512x512 (4 warnings) and c.png has no caption.
    assert facts["dataset_problems"] == 5
    assert "5 warnings" in page.status_label.text()
    assert page.problems_panel.count() == 5


def test_typing_saves_to_sidecar_and_undo_restores(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    folder = images(page)
    assert page.editor.entry is not None and page.editor.entry.path.name == "a.png"
    type_caption(qtbot, page, "sks, red square")
    qtbot.waitUntil(lambda: (folder / "a.txt").read_text(encoding="utf-8") == "sks, red square", timeout=5000)
    page.undo_stack.undo()
    assert page.editor.text.toPlainText() == "red, square"
    page.save_now()
    assert (folder / "a.txt").read_text(encoding="utf-8") == "red, square"
    page.undo_stack.redo()
    page.save_now()
    assert (folder / "a.txt").read_text(encoding="utf-8") == "sks, red square"


def test_shutdown_flushes_text_typed_just_now(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    type_caption(qtbot, page, "typed right before closing")
    page.shutdown()
    assert (images(page) / "a.txt").read_text(encoding="utf-8") == "typed right before closing"


def test_captions_that_cannot_be_saved_go_to_a_recovery_file_in_the_data_folder(  # type: ignore[no-untyped-def]
        qtbot, page: DatasetPage) -> None:
    import json
    import os

    folder = images(page)
    (folder / "c.txt").mkdir()  # a folder where the caption file would go: the write fails
    (folder / "d.txt").unlink()
    (folder / "d.txt").mkdir()
    page.select_path(folder / "c.png")
    type_caption(qtbot, page, "yellow, triangle")
    page.select_path(folder / "d.png")
    type_caption(qtbot, page, "green square, kept")
    page.select_path(folder / "a.png")
    type_caption(qtbot, page, "saved normally")
    said: list[str] = []
    page.context.sig_status.connect(said.append)
    cache = Path(os.environ["STUDIO_CACHE_DIR"])
    cache_before = sorted(p.relative_to(cache) for p in cache.rglob("*") if "thumbnails" not in p.parts)
    page.shutdown()
    recovery = Path(os.environ["STUDIO_DATA_DIR"]) / "recovery"
    files = list(recovery.iterdir())
    assert len(files) == 1 and files[0].name.startswith("unsaved-captions-")  # no half-written temporary left
    assert json.loads(files[0].read_text(encoding="utf-8")) == {
        str(folder / "c.png"): "yellow, triangle", str(folder / "d.png"): "green square, kept"}
    assert said[-1] == f"2 captions could not be saved; they are kept in {files[0]}."
    assert (folder / "a.txt").read_text(encoding="utf-8") == "saved normally"
    assert sorted(p.relative_to(cache) for p in cache.rglob("*") if "thumbnails" not in p.parts) == cache_before
    (folder / "c.txt").rmdir()  # the fixture's own shutdown then saves normally
    (folder / "d.txt").rmdir()
    (folder / "d.txt").write_text("green, square", encoding="utf-8")


def test_caption_for_uncaptioned_image_creates_sidecar(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    page.select_path(images(page) / "c.png")
    type_caption(qtbot, page, "yellow, triangle")
    page.save_now()
    assert (images(page) / "c.txt").read_text(encoding="utf-8") == "yellow, triangle"


def test_conflict_prompt_shows_both_texts(qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    asked: list[CaptionConflict] = []

    def ask(conflict: CaptionConflict, _others: int = 0) -> str:
        asked.append(conflict)
        return "disk"

    monkeypatch.setattr(page, "ask_conflict", ask)
    (images(page) / "a.txt").write_text("edited in another program", encoding="utf-8")
    type_caption(qtbot, page, "my text")
    page.save_now()
    assert [(c.our_text, c.disk_text) for c in asked] == [("my text", "edited in another program")]
    assert (images(page) / "a.txt").read_text(encoding="utf-8") == "edited in another program"
    assert page.editor.text.toPlainText() == "edited in another program"


def test_conflict_keep_mine_overwrites(qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(page, "ask_conflict", lambda conflict, others=0: "mine")
    (images(page) / "a.txt").write_text("theirs", encoding="utf-8")
    type_caption(qtbot, page, "mine")
    assert page.save_now()
    assert (images(page) / "a.txt").read_text(encoding="utf-8") == "mine"


def test_bulk_trigger_is_one_undo_step(page: DatasetPage) -> None:
    folder = images(page)
    assert page.apply_bulk("trigger", "sks") == 4
    page.save_now()
    assert (folder / "b.txt").read_text(encoding="utf-8") == "sks, blue, circle"
    assert (folder / "c.txt").read_text(encoding="utf-8") == "sks"
    assert page.editor.text.toPlainText() == "sks, red, square"
    assert page.undo_stack.count() == 1
    page.undo_stack.undo()
    page.save_now()
    assert (folder / "b.txt").read_text(encoding="utf-8") == "blue, circle"
    assert not (folder / "c.txt").exists()


def test_bulk_dialog_previews_count(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    from studio.gui.dataset.edits.bulk import BulkDialog

    dialog = BulkDialog(page.tools.scopes(), page)
    dialog.select("replace", "square", "cube", scope="All images")
    qtbot.waitUntil(lambda: dialog.preview.text() == "2 of 4 captions will change (2 matches).", timeout=5000)
    dialog.select("replace", "(", "x", scope="All images")
    dialog.regex.setChecked(True)
    qtbot.waitUntil(lambda: dialog.preview.text().startswith("Cannot apply"), timeout=5000)
    assert not dialog.buttons.button(dialog.buttons.StandardButton.Ok).isEnabled()
    dialog.deleteLater()


def test_filters(page: DatasetPage) -> None:
    page.filter_text.setText("square")
    assert [page.model.entry(r).path.name for r in range(page.model.rowCount())] == ["a.png", "d.png"]
    page.filter_text.setText("")
    page.no_caption.setChecked(True)
    assert page.model.rowCount() == 1 and page.model.entry(0).path.name == "c.png"
    page.no_caption.setChecked(False)
    page.tabs.setCurrentWidget(page.tags_panel)  # the tag table is filled when it is shown
    page.tags_panel._clicked(next(r for r in range(page.tags_panel.table.rowCount())
                                  if page.tags_panel.table.item(r, 0).text() == "circle"), 0)  # type: ignore[union-attr]
    assert page.filter_tag.text() == "circle" and page.model.rowCount() == 1
    page.filter_tag.setText("")
    page.with_problems.setChecked(True)
    assert page.model.rowCount() == 4


def test_keyboard_next_previous(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    page.editor.text.setFocus()
    qtbot.keyClick(page.editor.text, Qt.Key.Key_Right, Qt.KeyboardModifier.AltModifier)
    assert page.editor.entry is not None and page.editor.entry.path.name == "b.png"
    qtbot.keyClick(page.editor.text, Qt.Key.Key_Down, Qt.KeyboardModifier.ControlModifier)
    assert page.editor.entry.path.name == "c.png"
    qtbot.keyClick(page.editor.text, Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)
    assert page.editor.entry.path.name == "b.png"


def test_read_only_caption_is_refused(page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:
    assert page.store is not None
    monkeypatch.setattr(page.store, "write_refusal", lambda image: f"the folder {image.parent} is read-only")
    page.select_path(images(page) / "b.png")
    assert page.editor.text.isReadOnly()
    assert "Editing refused" in page.editor.notice.text()


def test_thumbnails_arrive_and_are_cached(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    first = images(page) / "a.png"
    qtbot.waitUntil(lambda: page.loader.pixmap(first) is not None, timeout=10000)
    assert list(page.loader.folder.rglob("*.jpg"))


def test_concept_repeats_edit_writes_config(page: DatasetPage) -> None:
    page.concepts_panel.table.cellWidget(0, 2).setValue(7)  # type: ignore[union-attr]
    assert page.context.project is not None
    assert page.context.project.load_config().dataset.concepts[0].repeats == 7


def test_kohya_repeats_rename_the_folder(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    from PIL import Image

    kohya = images(page) / "5_sks_dog"
    kohya.mkdir()
    Image.new("RGB", (32, 32)).save(kohya / "k.png")
    page.reload()
    assert page.wait_loaded(30)
    table = page.concepts_panel.table
    assert table.rowCount() == 2 and table.item(1, 1).text() == "1"  # type: ignore[union-attr]
    asked: list[str] = []
    page.concept_actions.confirm = lambda _title, text: asked.append(text) or False
    table.cellWidget(1, 2).setValue(12)  # type: ignore[union-attr]
    assert "12_sks_dog" in asked[0] and kohya.exists()  # asked first; "No" renames nothing
    assert table.cellWidget(1, 2).value() == 5  # type: ignore[union-attr]
    page.concept_actions.confirm = lambda _title, _text: True
    table.cellWidget(1, 2).setValue(12)  # type: ignore[union-attr]
    assert (images(page) / "12_sks_dog" / "k.png").exists() and not kohya.exists()
    assert page.wait_loaded(30)
    assert page.model.rowCount() == 5
    undo = page.concepts_panel.undo_rename
    assert undo.isVisibleTo(page) and "back to 5_sks_dog" in undo.text()
    undo.click()
    assert (kohya / "k.png").exists() and not (images(page) / "12_sks_dog").exists()
    assert page.wait_loaded(30) and not undo.isVisibleTo(page)


def test_missing_folder_is_reported_not_crashing(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    import shutil

    shutil.rmtree(images(page))
    page.reload()
    assert page.wait_loaded(30)
    assert page.model.rowCount() == 0
    assert page.problems_panel.count() == 1
    model = page.problems_panel.model
    assert "does not exist" in model.data(model.index(0), Qt.ItemDataRole.ToolTipRole)


def test_captions_arriving_keep_selection_and_rows(page: DatasetPage) -> None:
    """The grid is shown from the listing first; reading captions must not reset it under the person."""
    page.select_path(images(page) / "c.png")
    entries = list(page.model.entries)
    page.model.set_entries(entries)  # what the caption read does once the listing is shown
    assert page.view.currentIndex().row() == 2 and page.model.rowCount() == 4


def test_bulk_edit_saves_in_background_and_typing_meanwhile_is_kept(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    folder = images(page)
    page.apply_bulk("trigger", "sks")
    assert page.saver.busy  # the click returns before the files are written
    type_caption(qtbot, page, "typed while saving")
    page.editor.commit()
    qtbot.waitUntil(lambda: not page.saver.busy and page.store is not None and not page.store.has_pending,
                    timeout=10000)
    page.save_now()
    assert (folder / "a.txt").read_text(encoding="utf-8") == "typed while saving"
    assert (folder / "b.txt").read_text(encoding="utf-8") == "sks, blue, circle"


def test_thumbnail_helper_that_dies_is_replaced(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    loader = page.loader
    first, second = images(page) / "a.png", images(page) / "b.png"
    qtbot.waitUntil(lambda: loader.pixmap(first) is not None, timeout=20000)
    assert loader._helper is not None
    killed = loader._helper._process
    killed.kill()  # as if a broken file crashed the image decoder
    killed.join(5)
    loader.forget(second)
    qtbot.waitUntil(lambda: loader.pixmap(second) is not None, timeout=20000)
    # The thumbnail came from a new helper process, not from the one that died.
    assert loader._helper is not None and loader._helper.running
    assert loader._helper._process.pid != killed.pid and loader._helper._process.is_alive()
    assert not loader.failed(second)


def test_shutdown_leaves_no_helper_process(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    import multiprocessing

    qtbot.waitUntil(lambda: page.loader.pixmap(images(page) / "a.png") is not None, timeout=20000)
    page.shutdown()
    qtbot.waitUntil(lambda: not multiprocessing.active_children(), timeout=5000)


def _contrast(a, b) -> float:  # type: ignore[no-untyped-def]
    """WCAG contrast ratio of two QColors."""
    def luminance(c) -> float:  # type: ignore[no-untyped-def]
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
        return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("base", ["#ffffff", "#1e1e1e"])
def test_caption_tags_are_readable_on_light_and_dark_backgrounds(qtbot, base: str) -> None:
    from PySide6.QtGui import QColor, QPalette
    from PySide6.QtWidgets import QPlainTextEdit

    from studio.gui.dataset.editor.editor import TagHighlighter

    editor = QPlainTextEdit()
    qtbot.addWidget(editor)
    palette = editor.palette()
    palette.setColor(QPalette.ColorRole.Base, QColor(base))
    editor.setPalette(palette)
    highlighter = TagHighlighter(editor)
    editor.setPlainText("ohwx man, red jacket, bokeh")
    for fmt in highlighter.formats:
        assert _contrast(fmt.foreground().color(), QColor(base)) >= 4.5  # WCAG AA for body text


def test_opening_the_dataset_removes_what_killed_saves_left(page: DatasetPage) -> None:
    import os
    import time

    folder = images(page)
    old = time.time() - 3600
    leftovers = [folder / f".a.txt.{i:08x}.tmp" for i in range(3)]
    for path in leftovers:
        path.write_text("half a caption", encoding="utf-8")
        os.utime(path, (old, old))
    page.reload()
    assert page.wait_loaded(30)
    assert not any(p.exists() for p in leftovers)
    assert (folder / "a.txt").read_text(encoding="utf-8") == "red, square"


def test_a_concept_that_is_a_kohya_folder_is_renamed_with_its_repeats(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    """The concept's own folder is 3_background: repeats 3 -> 5 renames it to 5_background (asked
    first) and studio.toml follows, so kohya's scripts and the studio both train it x5; undo puts
    the folder, the path and the repeats back."""
    from PIL import Image

    from studio.core.dataset.layouts import detect_layout
    from studio.core.project.folder import concepts_from_layouts

    project = page.context.project
    assert project is not None
    background = project.root / "extra" / "3_background"
    background.mkdir(parents=True)
    Image.new("RGB", (32, 32)).save(background / "bg.png")
    concepts = [c.model_dump() for c in page.context.config.dataset.concepts]  # type: ignore[union-attr]
    added = concepts_from_layouts([detect_layout(background.parent)], project.root)  # as Add folder… does
    assert [(c.path, c.repeats) for c in added] == [("extra/3_background", 3)]
    assert not page.context.change_config({"dataset.concepts": [*concepts, added[0].model_dump()]})
    assert page.wait_loaded(30)
    table = page.concepts_panel.table
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == "extra/3_background")  # type: ignore[union-attr]
    asked: list[str] = []
    page.concept_actions.confirm = lambda _title, text: asked.append(text) or True
    table.cellWidget(row, 2).setValue(5)  # type: ignore[union-attr]
    assert asked and "5_background" in asked[0]
    assert (project.root / "extra" / "5_background" / "bg.png").exists() and not background.exists()
    written = project.load_config().dataset.concepts[-1]
    assert (written.path, written.repeats) == ("extra/5_background", 5)
    assert page.wait_loaded(30)
    undo = page.concepts_panel.undo_rename
    assert undo.isVisibleTo(page) and "back to 3_background" in undo.text()
    undo.click()
    assert (background / "bg.png").exists() and not (project.root / "extra" / "5_background").exists()
    written = project.load_config().dataset.concepts[-1]
    assert (written.path, written.repeats) == ("extra/3_background", 3)


def test_a_save_still_running_when_the_test_ends_is_finished_by_the_fixtures_shutdown(
        qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """pytest-qt closes and deletes its widgets before the fixtures' teardown; a page shut down after that waited
    240 s on a save whose result could no longer arrive, then failed on its deleted thread pool. The fixture now
    shuts the page down in pytest-qt's before-close hook. A wait cut to 5 s keeps a regression quick."""
    from studio.gui.base.event_loop import wait_for
    from studio.gui.dataset.edits.saving import CaptionSaver

    monkeypatch.setattr(CaptionSaver, "wait", lambda self, timeout_s=5.0: wait_for(
        lambda: self._running is None, 5.0, user_input=False))
    type_caption(qtbot, page, "typed at the very end")
    page._save_timer.start(0)  # the save starts in pytest-qt's own event processing, just before it closes


def test_a_broken_loss_mask_is_in_the_problems_panel(page: DatasetPage) -> None:
    """With dataset.masks = "folder", the panel names a mask that cannot be read, as check-dataset does."""
    config = page.context.config.model_copy(deep=True)
    config.dataset.masks, config.dataset.mask_folder = "folder", "masks"
    page.context.set_config(config)
    masks = images(page).parent / "masks"
    masks.mkdir()
    (masks / "a.png").write_bytes(b"not a picture")
    page.reload()
    assert page.wait_loaded(30)
    model = page.problems_panel.model
    tips = [model.data(model.index(row), Qt.ItemDataRole.ToolTipRole) for row in range(model.rowCount())]
    assert any(str(masks / "a.png") in tip and "the mask of a.png cannot be read" in tip for tip in tips), tips


def test_reload_shows_the_folder_as_changed_outside_the_studio(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    from PIL import Image

    folder = images(page)
    copying = folder / "e.png"
    copying.write_bytes(b"\x89PNG\r\n\x1a\n")  # a copy still under way: not a picture yet
    qtbot.mouseClick(page.toolbar.reload_button, Qt.MouseButton.LeftButton)
    assert page.wait_loaded(30)
    assert page.loader.pixmap(copying) is None
    qtbot.waitUntil(lambda: page.loader.failed(copying), timeout=10000)
    Image.new("RGB", (96, 64), "orange").save(copying)  # the copy finished
    (folder / "d.png").unlink()  # and another image was deleted in a file manager
    qtbot.mouseClick(page.toolbar.reload_button, Qt.MouseButton.LeftButton)
    assert page.wait_loaded(30)
    assert [page.model.data(page.model.index(r)) for r in range(page.model.rowCount())] == [
        "a.png", "b.png", "c.png", "e.png"]
    assert not page.loader.failed(copying)  # asked again, no longer shown as broken
    page.loader.pixmap(copying)
    qtbot.waitUntil(lambda: page.loader.pixmap(copying) is not None, timeout=10000)


def test_a_problem_in_a_caption_file_is_its_images(qtbot, project, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from PIL import Image

    from tests.gui.dataset.conftest import open_page

    folder = project.root / "images"
    for i, name in enumerate(("a.png", "b.png", "c.png", "d.png")):  # large enough to raise no warning of their own
        Image.new("RGB", (512, 512), (i * 60, 90, 30)).save(folder / name)
    (folder / "b.txt").write_bytes("blue, café".encode("cp1252"))  # written on Windows
    page = open_page(qtbot, project, tmp_path)
    assert {(Path(p.path).name, p.code) for p in page.problems} == {("b.txt", "non_utf8_caption"),
                                                                      ("c.png", "missing_caption")}
    page.with_problems.setChecked(True)
    assert [page.model.entry(r).path.name for r in range(page.model.rowCount())] == ["b.png", "c.png"]
    tip = page.model.data(page.model.index(0), Qt.ItemDataRole.ToolTipRole)
    assert "b.txt: is not UTF-8" in tip
    page.with_problems.setChecked(False)
    page.select_path(folder / "a.png")
    page.tabs.setCurrentWidget(page.problems_panel)
    listed = page.problems_panel.list
    row = next(r for r, p in enumerate(page.problems_panel.model.problems) if p.code == "non_utf8_caption")
    qtbot.mouseClick(listed.viewport(), Qt.MouseButton.LeftButton,
                     pos=listed.visualRect(page.problems_panel.model.index(row)).center())
    assert page.editor.entry is not None and page.editor.entry.path.name == "b.png"
    assert page.editor.text.toPlainText() == "blue, café"


def test_a_mask_or_a_control_image_with_a_problem_is_its_images(tmp_path: Path) -> None:
    from studio.core.dataset.scan import ImageEntry
    from studio.gui.dataset.scan.tasks import owning_images, problems_by_image

    control, masks = tmp_path / "control" / "a.png", tmp_path / "masks"
    a = ImageEntry(tmp_path / "img" / "a.jpg", None, None, "none", 1, str(tmp_path), controls=(control,))
    b = ImageEntry(tmp_path / "img" / "b.jpg", None, None, "none", 1, str(tmp_path))
    files = [str(masks / "b.png"), str(control), str(a.path), str(masks / "other.png")]
    owners = owning_images(files, [a, b], masks)
    assert owners == {str(masks / "b.png"): b.path, str(control): a.path}
    by_path = {str(masks / "b.png"): ["the mask is 10x10 but its image b.jpg is 40x40"], str(b.path): ["has no caption"]}
    assert problems_by_image(by_path, owners) == {
        str(b.path): ["b.png: the mask is 10x10 but its image b.jpg is 40x40", "has no caption"]}


def test_a_rename_undo_is_not_offered_in_another_project(qtbot, page: DatasetPage, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A kohya folder renamed in one project, then another project opened: its Undo button would rename the first
    project's folder back and write that folder into the second project's first concept."""
    from PIL import Image

    from studio.core.project.folder import create_project, default_config

    kohya = images(page) / "5_sks_dog"
    kohya.mkdir()
    Image.new("RGB", (32, 32)).save(kohya / "k.png")
    page.reload()
    assert page.wait_loaded(30)
    page.concept_actions.confirm = lambda _title, _text: True
    page.concepts_panel.table.cellWidget(1, 2).setValue(12)  # type: ignore[union-attr]
    renamed = images(page) / "12_sks_dog"
    assert renamed.is_dir() and page.wait_loaded(30)
    undo = page.concepts_panel.undo_rename
    assert undo.isVisibleTo(page)

    other = create_project(tmp_path / "other", default_config("photos"))
    (other.root / "photos").mkdir()
    page.context.set_project(other)
    assert page.wait_loaded(30)
    assert not undo.isVisibleTo(page)
    undo.click()  # a click that still reached it (a keyboard shortcut, an old screen reader) does nothing
    assert renamed.is_dir() and not kohya.exists()
    assert [c.path for c in other.load_config().dataset.concepts] == ["photos"]


def test_the_bulk_dialog_counts_once_typing_pauses_and_ok_applies_what_was_typed(  # type: ignore[no-untyped-def]
        qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.dataset.captions import caption_ops
    from studio.gui.dataset.edits.bulk import BulkDialog

    runs: list[str] = []
    add_trigger = caption_ops.add_trigger
    monkeypatch.setattr(caption_ops, "add_trigger", lambda c, word: runs.append(word) or add_trigger(c, word))
    dialog = BulkDialog(page.tools.scopes(), page)
    dialog.select("trigger", scope="All images")
    qtbot.waitUntil(lambda: not dialog.counting(), timeout=5000)
    runs.clear()
    qtbot.keyClicks(dialog.first, "sks")
    assert runs == []  # over 20,000 captions each key would cost up to a second
    qtbot.waitUntil(lambda: dialog.preview.text() == "4 of 4 captions will change.", timeout=5000)
    assert runs == ["sks"]
    qtbot.keyClicks(dialog.first, "x")
    dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()  # before the pause: the edits are worked out
    qtbot.waitUntil(lambda: dialog.result() == dialog.DialogCode.Accepted, timeout=5000)
    assert {edit.after.split(", ")[0] for edit in dialog.edits} == {"sksx"}
    dialog.deleteLater()


def test_the_selected_images_scope_is_the_images_selected_in_grid_order(page: DatasetPage) -> None:
    from PySide6.QtCore import QItemSelectionModel

    selection = page.view.selectionModel()
    selection.clearSelection()
    for row in (3, 0, 1):  # d, then a and b: two ranges, chosen out of order
        selection.select(page.model.index(row), QItemSelectionModel.SelectionFlag.Select)
    assert [e.path.name for e in page.selected_entries()] == ["a.png", "b.png", "d.png"]
    assert page.apply_bulk("trigger", "sks", scope="Selected images") == 3
    assert page.save_now()
    assert (images(page) / "b.txt").read_text(encoding="utf-8") == "sks, blue, circle"
    assert not (images(page) / "c.txt").exists()  # not selected: still no caption
