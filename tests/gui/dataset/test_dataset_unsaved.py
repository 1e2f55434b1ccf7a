"""Captions a person typed are never dropped without a word: not when the dataset is read again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from studio.gui.dataset.page import DatasetPage
from tests.gui.dataset.test_dataset_page import images, type_caption


def test_reading_the_dataset_again_keeps_captions_that_could_not_be_saved(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    """A concept added, a setting changed or another project opened reads the dataset again; captions whose
    save failed were dropped with the old store, and only the save's error was shown."""
    folder = images(page)
    (folder / "c.txt").mkdir()  # where the caption file would go: the write fails
    page.select_path(folder / "c.png")
    type_caption(qtbot, page, "yellow, triangle")
    said: list[str] = []
    page.context.sig_status.connect(said.append)
    page.reload()
    recovery = Path(os.environ["STUDIO_DATA_DIR"]) / "recovery"
    files = list(recovery.iterdir()) if recovery.exists() else []
    assert len(files) == 1
    assert json.loads(files[0].read_text(encoding="utf-8")) == {str(folder / "c.png"): "yellow, triangle"}
    assert f"1 caption could not be saved; it is kept in {files[0]}." in said
    assert page.wait_loaded(30)
    (folder / "c.txt").rmdir()


def test_tag_counts_follow_the_text_taken_from_disk_in_a_conflict(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    """The Tags tab counted the person's text while the conflict question was open; choosing the text on disk
    left those counts standing until some later edit."""
    folder = images(page)
    (folder / "a.txt").write_text("purple, hexagon", encoding="utf-8")
    type_caption(qtbot, page, "mine, square")

    def ask(_conflict: object, _others: int = 0) -> str:
        # The person reads the question for a while: the Tags tab recounts meanwhile.
        qtbot.waitUntil(lambda: page.tags_panel.counts.get("mine") == 1, timeout=5000)
        return "disk"

    page.ask_conflict = ask  # type: ignore[method-assign]
    page.save_now()
    assert page.editor.text.toPlainText() == "purple, hexagon"
    qtbot.waitUntil(lambda: page.tags_panel.counts.get("purple") == 1, timeout=5000)
    assert "mine" not in page.tags_panel.counts


def test_browsing_past_a_caption_the_box_cannot_show_exactly_leaves_its_file_alone(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    """The caption box shows a no-break space (text copied from a web page) as a space and a Unicode line
    separator as a new line; moving on to the next image took that as typing: an undo step the person never
    made, and the file rewritten (or a conflict asked about a file they never touched)."""
    folder = images(page)
    data = "red,\u00a0square\u2028second line".encode()
    (folder / "b.txt").write_bytes(data)
    page.reload()
    assert page.wait_loaded(30)
    page.select_path(folder / "b.png")
    assert page.editor.entry is not None and page.editor.entry.path.name == "b.png"
    page.step(1)
    page.step(-1)
    page.save_now()
    assert page.undo_stack.count() == 0
    assert (folder / "b.txt").read_bytes() == data


@pytest.mark.parametrize("row", [0, 1])
def test_the_image_chosen_while_captions_are_read_is_shown_once_they_arrive(  # type: ignore[no-untyped-def]
        qtbot, page: DatasetPage, monkeypatch, row: int) -> None:
    """The grid shows the images before their captions are read; an image clicked meanwhile must get the editor
    when the captions come, not stay on "No image selected" with a box that takes no typing."""
    import threading

    from studio.gui.dataset import page as page_module

    release = threading.Event()
    read_folders = page_module.read_folders

    def slow_read(*args):  # type: ignore[no-untyped-def]
        release.wait(30)
        return read_folders(*args)

    monkeypatch.setattr(page_module, "read_folders", slow_read)
    page.reload()
    qtbot.waitUntil(lambda: page.model.rowCount() == 4, timeout=10000)
    page.view.setCurrentIndex(page.model.index(row))  # the person clicks an image
    release.set()
    assert page.wait_loaded(30)
    assert page.view.currentIndex().row() == row
    assert page.editor.entry is not None and page.editor.entry.path.name == "ab"[row] + ".png"
    assert not page.editor.text.isReadOnly()


def test_one_answer_settles_every_caption_another_program_changed(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    """A captioning job run in a terminal rewrote the captions; a bulk edit on all images then asked about each
    file in a dialog of its own, one after another (thousands of clicks). The first one offers the same answer
    for the rest."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    folder = images(page)
    for name in ("a", "b", "d"):
        (folder / f"{name}.txt").write_text(f"{name} by the captioner", encoding="utf-8")
    asked: list[str] = []

    def answer() -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox) and box.isVisible():
            asked.append(box.checkBox().text() if box.checkBox() is not None else "")
            if box.checkBox() is not None:
                box.checkBox().setChecked(True)
            next(b for b in box.buttons() if b.text() == "Use the text on disk").click()

    clicker = QTimer(interval=10)
    clicker.timeout.connect(answer)
    clicker.start()
    try:
        assert page.apply_bulk("trigger", "sks") == 4
        page.save_now()
    finally:
        clicker.stop()
    assert asked == ["Do the same for the 2 other captions changed on disk"]
    for name in ("a", "b", "d"):
        assert (folder / f"{name}.txt").read_text(encoding="utf-8") == f"{name} by the captioner"
        assert page.store is not None and page.store.caption(folder / f"{name}.png") == f"{name} by the captioner"
    assert (folder / "c.txt").read_text(encoding="utf-8") == "sks"


def test_undo_after_taking_the_text_on_disk_leaves_the_other_programs_caption(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    """The person's edit of a.txt was dropped for the text another program wrote: Ctrl+Z (and redo) then has
    nothing of theirs to take back there, and never writes the old caption over the other program's."""
    folder = images(page)
    (folder / "a.txt").write_text("tagged by another program", encoding="utf-8")
    type_caption(qtbot, page, "my text")
    page.ask_conflict = lambda _conflict, _others=0: "disk"  # type: ignore[method-assign]
    page.save_now()
    assert (folder / "a.txt").read_text(encoding="utf-8") == "tagged by another program"
    page.undo_stack.undo()
    assert page.save_now()
    assert (folder / "a.txt").read_text(encoding="utf-8") == "tagged by another program"
    assert page.editor.text.toPlainText() == "tagged by another program"
    page.undo_stack.redo()
    assert page.save_now()
    assert (folder / "a.txt").read_text(encoding="utf-8") == "tagged by another program"


def test_closing_with_captions_that_cannot_be_saved_asks_first(qtbot, page: DatasetPage,  # type: ignore[no-untyped-def]
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The window closing was the one moment nobody read the status bar: the captions went to a recovery file
    unannounced. Now the person is asked first, Cancel keeps the window, and what was wrong is said."""
    folder = images(page)
    (folder / "c.txt").mkdir()  # where the caption file would go: the write fails
    page.select_path(folder / "c.png")
    type_caption(qtbot, page, "yellow, triangle")
    from PySide6.QtWidgets import QMessageBox

    shown: list[str] = []

    def cancel(box: QMessageBox) -> int:
        shown.append(box.text())
        next(b for b in box.buttons() if b.text() == "Cancel").click()
        return 0

    monkeypatch.setattr(QMessageBox, "exec", cancel)
    assert not page.can_close()
    recovery = Path(os.environ["STUDIO_DATA_DIR"]) / "recovery"
    assert shown[0].startswith("1 caption could not be saved: Cannot save the caption of c.png")
    assert f"kept in a recovery file in {recovery}?" in shown[0]
    asked: list[tuple[int, str]] = []
    page.confirm_close = lambda count, reason: asked.append((count, reason)) or False  # type: ignore[method-assign]
    assert not page.can_close()
    assert asked[0][0] == 1 and f"Cannot save the caption of c.png to {folder / 'c.txt'}" in asked[0][1]
    assert not recovery.exists() or not list(recovery.iterdir())  # nothing written yet: the person may fix it
    (folder / "c.txt").rmdir()  # fixed: closing now saves it
    assert page.can_close() and len(asked) == 1
    assert (folder / "c.txt").read_text(encoding="utf-8") == "yellow, triangle"


def test_escape_on_the_conflict_question_drops_nobodys_text(qtbot, page: DatasetPage,  # type: ignore[no-untyped-def]
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Escape or the title bar's cross chose "Use the text on disk": the caption the person had typed was gone.
    Now the question waits for a choice."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMessageBox

    folder = images(page)
    (folder / "a.txt").write_text("edited in another program", encoding="utf-8")
    type_caption(qtbot, page, "my text")
    seen: dict[str, object] = {}

    def exec_(box: QMessageBox) -> int:
        box.show()
        qtbot.keyClick(box, Qt.Key.Key_Escape)
        box.close()
        seen["after escape and close"] = (box.clickedButton(), box.isVisible(), box.text())
        next(b for b in box.buttons() if b.text() == "Keep my text").click()
        return 0

    monkeypatch.setattr(QMessageBox, "exec", exec_)
    assert page.save_now()
    clicked, visible, text = seen["after escape and close"]  # type: ignore[misc]
    assert clicked is None and visible and "was changed by another program" in text
    assert (folder / "a.txt").read_text(encoding="utf-8") == "my text"
