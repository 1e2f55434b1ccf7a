"""The grid filter's lookups give the rows a caption-by-caption reading gives, also after captions change."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from studio.core.dataset.captions.caption_store import CaptionEdit, CaptionStore
from studio.core.dataset.captions.caption_tags import split_tags, tag_counts
from studio.core.dataset.scan import ImageEntry
from studio.gui.dataset.grid.grid_search import GridSearch
from studio.gui.dataset.page import DatasetPage

CAPTIONS = ["Long Hair, smile", "long  hair,smile ,", "long hairs, cat", None, "", "a photo of a cat with long hair",
            "LONG HAIR", " , ,", "Ünïcode Tag, straße", "cat,dog, cat"]


def _entries() -> list[ImageEntry]:
    return [ImageEntry(Path(f"/data/Img_{i}.PNG"), caption, None, "txt", 1, "/data")
            for i, caption in enumerate(CAPTIONS)]


def _reference(entries: list[ImageEntry], text: str, tag: str) -> list[int]:
    """The filter as it reads each caption: name or caption holds the text; the caption has the tag exactly."""
    text, tag = text.lower(), tag.strip().lower()
    return [i for i, e in enumerate(entries)
            if (not text or text in e.path.name.lower() or text in (e.caption or "").lower())
            and (not tag or tag in [t.lower() for t in split_tags(e.caption)])]


QUERIES = [("", ""), ("long hair", ""), ("", "long hair"), ("", " LONG hair "), ("", "long  hair"), ("cat", ""),
           ("img_1", ""), (".png", "smile"), ("", "straße"), ("ünïcode", ""), ("cat", "cat"), ("hair", "smile"),
           ("png\0long", ""), ("", "nothing"), ("z", "")]


@pytest.mark.parametrize(("text", "tag"), QUERIES)
def test_the_search_finds_what_reading_each_caption_finds(text: str, tag: str) -> None:
    entries = _entries()
    assert GridSearch(entries).matching(text, tag) == _reference(entries, text, tag)


def test_captions_edited_and_undone_are_found_by_their_new_text() -> None:
    entries = _entries()
    search = GridSearch(entries)
    store = CaptionStore(entries)
    assert search.matching("", "long hair") == [0, 1, 6]
    edits = [CaptionEdit(entries[0].path, entries[0].caption, "short hair, smile"),
             CaptionEdit(entries[3].path, None, "long hair")]
    store.apply(edits)
    assert search.matching("", "long hair") == [1, 3, 6] == _reference(entries, "", "long hair")
    assert search.matching("short", "") == [0]
    store.revert(edits)
    assert search.matching("", "long hair") == [0, 1, 6]
    assert search.matching("short", "") == []


def test_the_tags_are_counted_as_the_tags_panel_counts_them() -> None:
    entries, counts = _entries(), Counter[str]()
    GridSearch(entries, counts)
    assert counts == tag_counts(e.caption for e in entries)


def test_the_tag_filter_follows_a_caption_typed_in_the_editor(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    page.filter_tag.setText("circle")
    assert [page.model.entry(r).path.name for r in range(page.model.rowCount())] == ["b.png"]
    page.filter_tag.setText("")
    page.select_path(page.model.entry(0).path)  # a.png: "red, square"
    page.editor.text.selectAll()
    qtbot.keyClicks(page.editor.text, "red, Circle")
    page.editor.commit()
    page.filter_tag.setText("circle")
    assert [page.model.entry(r).path.name for r in range(page.model.rowCount())] == ["a.png", "b.png"]
    page.filter_tag.setText("square")
    assert [page.model.entry(r).path.name for r in range(page.model.rowCount())] == ["d.png"]
