"""The caption editor's preview is decoded on a thread of its own: a huge image never freezes the window, and an
unreadable or enormous one shows as such."""

from __future__ import annotations

import struct
import threading
import zlib
from pathlib import Path

import pytest
from PIL import Image

from studio.core.project.folder import Project
from studio.gui.dataset.editor import picture_reader
from studio.gui.dataset.editor.picture_reader import LOADING_TEXT, UNREADABLE_TEXT
from studio.gui.dataset.page import DatasetPage
from tests.gui.dataset.conftest import open_page


def _enormous_png(path: Path, width: int, height: int) -> None:
    """A PNG whose header says `width` x `height` (a few hundred bytes: its pixels are never decoded)."""
    Image.new("RGB", (8, 8), "white").save(path)
    data = bytearray(path.read_bytes())
    start = 8 + 8  # signature, then IHDR's length and type
    data[start:start + 8] = struct.pack(">II", width, height)
    data[start + 13:start + 17] = struct.pack(">I", zlib.crc32(bytes(data[start - 4:start + 13])))
    path.write_bytes(bytes(data))


def test_the_preview_is_decoded_off_the_gui_thread_and_the_editor_is_usable_meanwhile(  # type: ignore[no-untyped-def]
        qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:
    release, decoding = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    read = picture_reader.read_preview

    def slow_read(path: Path, size: int):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread())
        decoding.set()
        release.wait(10)  # a 100 MB image, as long as the test wants
        return read(path, size)

    monkeypatch.setattr(picture_reader, "read_preview", slow_read)
    assert page.context.project is not None
    square = page.context.project.root / "images" / "d.png"
    page.select_path(square)  # returns while the picture is still being decoded
    assert page.editor.entry is not None and page.editor.entry.path == square
    assert page.editor.text.toPlainText() == "green, square"  # the caption can be read and typed at once
    assert page.editor.preview.text() == LOADING_TEXT
    qtbot.waitUntil(decoding.is_set, timeout=5000)
    release.set()
    assert page.editor.wait_preview()
    assert threads and threading.main_thread() not in threads
    assert not page.editor.preview.pixmap().isNull()
    assert page.editor.preview.pixmap().toImage().pixelColor(5, 5).blue() == 200 - 3 * 40  # d.png's colour


def test_stepping_faster_than_previews_decode_shows_the_last_image(  # type: ignore[no-untyped-def]
        qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    read = picture_reader.read_preview
    asked: list[str] = []

    def slow_read(path: Path, size: int):  # type: ignore[no-untyped-def]
        asked.append(path.name)
        release.wait(10)
        return read(path, size)

    monkeypatch.setattr(picture_reader, "read_preview", slow_read)
    page.view.setCurrentIndex(page.model.index(0))
    for _ in range(3):
        page.step(1)
    release.set()
    assert page.editor.wait_preview()
    assert page.editor.entry is not None and page.editor.entry.path.name == "d.png"
    assert page.editor.preview.pixmap().toImage().pixelColor(5, 5).red() == 3 * 60  # d.png's, not an earlier one
    assert len(asked) <= 3  # the images stepped past while one decoded were never read


def test_a_broken_or_enormous_image_shows_a_placeholder(qtbot, project: Project, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = project.root / "images"
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not a picture")
    _enormous_png(folder / "huge.png", 30_000, 30_000)
    page = open_page(qtbot, project, tmp_path)
    for name in ("broken.png", "huge.png"):
        page.select_path(folder / name)
        assert page.editor.wait_preview()
        assert page.editor.preview.pixmap().isNull() and page.editor.preview.text() == UNREADABLE_TEXT
        assert page.editor.text.toPlainText() == ""  # the caption can still be written
        # The grid's cell: the unreadable placeholder once the thumbnail helper has tried.
        qtbot.waitUntil(lambda n=name: page.loader.failed(folder / n), timeout=20000)


def test_the_caption_review_reads_its_preview_off_the_gui_thread_and_names_an_unreadable_image(  # type: ignore[no-untyped-def]
        qtbot, page: DatasetPage, monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.dataset.captions.auto_caption import MachineCaption, ScoredTag

    threads: list[threading.Thread] = []
    read = picture_reader.read_preview

    def recorded(path: Path, size: int):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread())
        return read(path, size)

    monkeypatch.setattr(picture_reader, "read_preview", recorded)
    assert page.store is not None
    broken = next(image for image in page.store.entries if image.name == "c.png")
    broken.write_bytes(b"not an image any more")
    dialog = page.open_caption_dialog()
    assert dialog is not None
    for image in sorted(page.store.entries):
        dialog.add_proposal(MachineCaption(image, tags=(ScoredTag("outdoors", 0.9),)))
    dialog.table.setCurrentCell(dialog.rows.index(broken), 0)
    qtbot.waitUntil(lambda: dialog.preview_image.text() == UNREADABLE_TEXT, timeout=5000)
    dialog.table.setCurrentCell(dialog.rows.index(next(i for i in dialog.rows if i.name == "a.png")), 0)
    qtbot.waitUntil(lambda: not dialog.preview_image.pixmap().isNull(), timeout=5000)
    assert threads and threading.main_thread() not in threads
