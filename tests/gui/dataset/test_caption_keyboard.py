"""Captioning with the keyboard alone: the caret waits at the end, tags complete from the dataset,
the undo keys in the caption box are the page's undo, previews keep their shape, filters say what they hide."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from studio.gui.dataset.page import DatasetPage


def images(page: DatasetPage) -> Path:
    assert page.context.project is not None
    return page.context.project.root / "images"


def test_alt_right_then_typing_appends_to_the_caption(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    box = page.editor.text
    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=2000)
    qtbot.keyClick(box, Qt.Key.Key_Right, Qt.KeyboardModifier.AltModifier)
    assert page.editor.entry is not None and page.editor.entry.path.name == "b.png"
    qtbot.keyClicks(box, ", next")
    qtbot.waitUntil(lambda: (images(page) / "b.txt").read_text(encoding="utf-8") == "blue, circle, next",
                    timeout=5000)


def test_tab_from_the_grid_lands_at_the_end_of_the_caption(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    page.view.setFocus()
    qtbot.waitUntil(page.view.hasFocus, timeout=2000)
    qtbot.keyClick(page.view, Qt.Key.Key_Right)  # the grid's own arrow keys pick an image
    assert page.editor.entry is not None and page.editor.entry.path.name == "b.png"
    qtbot.keyClick(page.view, Qt.Key.Key_Tab)
    box = page.editor.text
    assert QApplication.focusWidget() is box
    assert box.textCursor().position() == len(box.toPlainText())
    qtbot.keyClicks(box, ", tabbed")
    page.save_now()
    assert (images(page) / "b.txt").read_text(encoding="utf-8") == "blue, circle, tabbed"
    qtbot.keyClick(box, Qt.Key.Key_Tab)  # Tab leaves the box; it types no tab character
    assert "\t" not in box.toPlainText()


def test_tags_complete_from_the_dataset(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    box = page.editor.text
    page.select_path(images(page) / "c.png")  # no caption yet
    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=2000)
    qtbot.keyClicks(box, "sq")
    popup = box.completer.popup()
    qtbot.waitUntil(popup.isVisible, timeout=2000)
    assert box.completer.currentCompletion() == "square"
    qtbot.keyClick(popup, Qt.Key.Key_Return)
    assert box.toPlainText() == "square"
    qtbot.keyClicks(box, ", gre")
    qtbot.waitUntil(lambda: box.completer.currentCompletion() == "green", timeout=2000)
    qtbot.keyClick(box.completer.popup(), Qt.Key.Key_Return)
    page.save_now()
    assert (images(page) / "c.txt").read_text(encoding="utf-8") == "square, green"


def test_undo_keys_in_the_caption_box_are_the_pages_undo(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    box = page.editor.text
    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=2000)
    qtbot.keyClicks(box, ", typed")
    page.save_now()  # the edit was saved: the box's own history would be gone
    path = images(page) / "a.txt"
    assert path.read_text(encoding="utf-8") == "red, square, typed"
    assert page.undo_stack.canUndo()
    qtbot.keyClick(box, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert box.toPlainText() == "red, square"
    page.save_now()
    assert path.read_text(encoding="utf-8") == "red, square"
    qtbot.keyClick(box, Qt.Key.Key_Y, Qt.KeyboardModifier.ControlModifier)
    assert box.toPlainText() == "red, square, typed"
    qtbot.keyClick(box, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(box, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    # QTest leaves Shift held in the application's state after a two-modifier click; let it go, or
    # the next test's selectRow() would extend a selection as with Shift down.
    qtbot.keyRelease(box, Qt.Key.Key_Shift)
    page.save_now()
    assert path.read_text(encoding="utf-8") == "red, square, typed"


def test_a_portrait_preview_is_shown_whole(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    portrait = images(page) / "tall.png"
    Image.new("RGB", (768, 1024), (10, 200, 10)).save(portrait)
    page.reload()
    assert page.wait_loaded(30)
    page.select_path(portrait)
    assert page.editor.wait_preview()  # decoded on the preview thread
    preview = page.editor.preview
    preview.resize(500, 300)  # a wide, short preview area: the image must fit its height
    shown = preview.image_rect()
    assert abs(shown.width() / shown.height() - 768 / 1024) < 0.01
    assert preview.rect().contains(shown)  # whole: nothing cut off


def test_empty_filter_result_says_so_and_clears_the_preview(page: DatasetPage) -> None:
    page.filter_text.setText("nothing has this")
    assert page.model.rowCount() == 0
    assert page.editor.entry is None and page.editor.preview.text() == "No image matches the filter."
    assert page.status_label.text() == "No image of 4 matches the filter; clear it to see them all."
    page.filter_text.setText("square")
    assert page.status_label.text() == "2 of 4 images shown (filtered)."
    assert page.editor.entry is not None


def test_no_caption_filter_counts_captions_made_from_folder_names(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    kohya = images(page) / "3_sks_dog"
    kohya.mkdir()
    Image.new("RGB", (64, 64)).save(kohya / "k.png")  # its caption comes from the folder's name
    page.reload()
    assert page.wait_loaded(30)
    page.no_caption.setChecked(True)
    names = sorted(page.model.entry(r).path.name for r in range(page.model.rowCount()))
    assert names == ["c.png", "k.png"]


def test_the_tag_list_is_readable_and_enter_or_tab_take_the_highlighted_tag(
        qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    """Enter and Tab typed in the caption box take the highlighted tag (Tab does not leave the box);
    the list shows up to 8 whole rows, as wide as its tags; a half-typed word saved on a pause is
    not offered back: the tags come from the other captions."""
    folder = images(page)
    long_tags = [f"sunlit meadow with tall grass number {i}" for i in range(12)]
    (folder / "d.txt").write_text(", ".join(["green", "square", *long_tags]), encoding="utf-8")
    page.reload()
    assert page.wait_loaded(30)
    box = page.editor.text
    page.select_path(folder / "c.png")  # no caption yet
    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=2000)
    qtbot.keyClicks(box, "sun")
    popup = box.completer.popup()
    qtbot.waitUntil(popup.isVisible, timeout=2000)
    assert popup.height() >= 8 * popup.sizeHintForRow(0)  # 8 whole rows of the 12 matches
    assert popup.width() >= popup.fontMetrics().horizontalAdvance(long_tags[11])  # no tag cut
    qtbot.keyClick(box, Qt.Key.Key_Down)  # the second match
    highlighted = popup.currentIndex().data()
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert box.toPlainText() == highlighted and not popup.isVisible()
    qtbot.keyClicks(box, ", gre")
    qtbot.waitUntil(popup.isVisible, timeout=2000)
    qtbot.keyClick(box, Qt.Key.Key_Tab)
    assert box.toPlainText() == f"{highlighted}, green"
    assert QApplication.focusWidget() is box  # Tab took the tag; it did not leave the box

    qtbot.keyClicks(box, ", blu")  # half a word, then a pause: it is saved
    page.save_now()
    page._update_tags()
    qtbot.waitUntil(lambda: page.tags_panel.counts.get("blu") == 1, timeout=5000)
    page.select_path(folder / "a.png")
    page.select_path(folder / "c.png")
    box.move_caret_to_end()
    qtbot.keyClicks(box, "x, bl")  # "blux": the word this caption holds is not a tag to offer
    qtbot.waitUntil(popup.isVisible, timeout=2000)
    offered = [box.completer.completionModel().index(r, 0).data()
               for r in range(box.completer.completionModel().rowCount())]
    assert offered == ["blue"]
