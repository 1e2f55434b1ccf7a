from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from dataset_files import MakeDataset

from studio.core.config.schema import ConceptSection
from studio.core.dataset.captions.caption_store import CaptionEdit, CaptionStore
from studio.core.dataset.scan import scan_concept


def store_for(root: Path, **kw: object) -> CaptionStore:
    return CaptionStore(scan_concept(ConceptSection(path=str(root), **kw)))  # type: ignore[arg-type]


def test_edit_is_saved_to_its_sidecar(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "old", "b.png": "keep"})
    store = store_for(root)
    store.set_caption(root / "a.png", "new caption")
    assert store.pending == [root / "a.png"]
    assert (root / "a.txt").read_text() == "old"  # nothing written before a flush
    report = store.flush()
    assert report.saved == [root / "a.png"] and not report.conflicts and not report.errors
    assert (root / "a.txt").read_text(encoding="utf-8") == "new caption"
    assert (root / "b.txt").read_text() == "keep"
    assert store.pending == []
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


def test_caption_file_extension_is_kept(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": None})
    (root / "a.caption").write_text("x")
    store = store_for(root)
    store.set_caption(root / "a.png", "y")
    store.flush()
    assert (root / "a.caption").read_text() == "y" and not (root / "a.txt").exists()


def test_new_sidecar_for_uncaptioned_and_undo_removes_it(make_dataset: MakeDataset) -> None:
    root = make_dataset({"10_dog/a.png": None})
    image = root / "10_dog" / "a.png"
    store = store_for(root)
    assert store.caption(image) == "dog"
    edit = CaptionEdit(image, "dog", "sks dog")
    store.apply([edit])
    store.flush()
    assert (root / "10_dog" / "a.txt").read_text() == "sks dog"
    store.revert([edit])
    store.flush()
    assert not (root / "10_dog" / "a.txt").exists()
    assert store.entries[image].caption_source == "folder"


def test_no_empty_file_for_image_that_had_no_caption(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": None})
    store = store_for(root)
    edit = CaptionEdit(root / "a.png", None, "x")
    store.apply([edit])
    store.revert([edit])
    assert store.flush().saved == []
    assert not (root / "a.txt").exists()


def test_conflict_when_changed_on_disk(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "old"})
    store = store_for(root)
    (root / "a.txt").write_text("changed elsewhere")
    store.set_caption(root / "a.png", "mine")
    report = store.flush()
    assert report.saved == []
    (conflict,) = report.conflicts
    assert (conflict.disk_text, conflict.our_text) == ("changed elsewhere", "mine")
    assert "changed by another program" in conflict.describe()
    assert (root / "a.txt").read_text() == "changed elsewhere"
    assert store.keep_ours(conflict).saved == [root / "a.png"]
    assert (root / "a.txt").read_text() == "mine"


def test_conflict_take_disk_text(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "old"})
    store = store_for(root)
    (root / "a.txt").write_text("theirs")
    store.set_caption(root / "a.png", "mine")
    (conflict,) = store.flush().conflicts
    store.take_disk_text(conflict)
    assert store.caption(root / "a.png") == "theirs" and store.pending == []


def test_same_content_rewritten_elsewhere_is_no_conflict(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "old"})
    store = store_for(root)
    (root / "a.txt").write_text("old\r\n")  # touched, same text
    store.set_caption(root / "a.png", "mine")
    assert store.flush().saved == [root / "a.png"]


def test_undoing_an_edit_gives_each_caption_file_back_byte_for_byte(make_dataset: MakeDataset) -> None:
    """A bulk edit writes UTF-8 with plain new lines; undoing it wrote the old text the same way, so a file from
    Notepad lost its BOM and its CRLF, a cp1252 or UTF-16 file came back in another encoding (other programs read
    "café" as "cafÃ©"), and a final new line was gone. The person undid the edit: they get their files back."""
    from studio.core.dataset.captions.caption_ops import add_tag

    files = {
        "bom": b"\xef\xbb\xbfred, square\r\nsecond line\r\n",
        "cp1252": "café, crème brûlée\n".encode("cp1252"),
        "utf16": "emoji 😀, ümlaut".encode("utf-16"),
        "plain": b"plain, caption",
    }
    root = make_dataset({f"{name}.png": None for name in files})
    for name, data in files.items():
        (root / f"{name}.txt").write_bytes(data)
    store = store_for(root)
    edits = add_tag(store.captions(), "new tag")
    store.apply(edits)
    assert len(store.flush().saved) == 4
    assert (root / "cp1252.txt").read_text(encoding="utf-8") == "café, crème brûlée, new tag"
    store.revert(edits)
    assert len(store.flush().saved) == 4 and not store.has_pending
    assert {name: (root / f"{name}.txt").read_bytes() for name in files} == files
    assert not store.entries[root / "cp1252.png"].caption_utf8  # the check still says it is not UTF-8
    store.apply(edits)  # redo: written as an edit is, again
    store.flush()
    assert (root / "utf16.txt").read_text(encoding="utf-8") == "emoji 😀, ümlaut, new tag"


def test_a_full_disk_is_named_with_what_to_do_about_it(make_dataset: MakeDataset,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A save that fails for want of space told the person to make the folder writable."""
    import errno

    from studio.core.dataset.captions import caption_files

    root = make_dataset({"a.png": "old"})
    store = store_for(root)
    store.set_caption(root / "a.png", "new")

    def full(_fd: int, _data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(caption_files.os, "write", full)
    (error,) = store.flush().errors
    monkeypatch.undo()
    assert "No space left on device" in str(error) and "free some space on that disk" in str(error)
    assert "writable" not in str(error)
    assert (root / "a.txt").read_text() == "old" and store.has_pending
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


def test_metadata_row_updated_other_keys_and_rows_kept(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": None, "b.png": None})
    rows = [{"file_name": "a.png", "text": "ä one", "score": 5}, {"file_name": "b.png", "text": "two"}]
    (root / "metadata.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{bad line\n")
    store = store_for(root)
    store.set_caption(root / "a.png", "ä new")
    assert store.flush().saved == [root / "a.png"]
    lines = (root / "metadata.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"file_name": "a.png", "text": "ä new", "score": 5}
    assert json.loads(lines[1]) == rows[1]
    assert lines[2] == "{bad line"
    assert not (root / "a.txt").exists()


def test_metadata_rows_with_unicode_line_separators_are_read_and_kept_whole(make_dataset: MakeDataset) -> None:
    """JSON lets a string hold U+2028, U+2029 and U+0085 as they are (Python's json.dumps writes them so); the
    file's lines end at newlines only. Splitting at those characters too left the row's image uncaptioned and,
    at the next save of another row, broke the row in two for every program reading the file."""
    root = make_dataset({"a.png": None, "b.png": None})
    meta = root / "metadata.jsonl"
    other = {"file_name": "b.png", "text": "first line\u2028second\u2029third\u0085fourth"}
    meta.write_text(json.dumps({"file_name": "a.png", "text": "a"}) + "\n"
                    + json.dumps(other, ensure_ascii=False) + "\n", encoding="utf-8")
    before = meta.read_bytes()
    store = store_for(root)
    assert store.caption(root / "b.png") == other["text"]
    store.set_caption(root / "a.png", "A new")
    assert store.flush().saved == [root / "a.png"]
    assert meta.read_bytes() == before.replace(b'"text": "a"', b'"text": "A new"')


def test_metadata_conflict_only_for_the_changed_row(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": None, "b.png": None})
    meta = root / "metadata.jsonl"
    meta.write_text('{"file_name": "a.png", "text": "a"}\n{"file_name": "b.png", "text": "b"}\n')
    store = store_for(root)
    meta.write_text('{"file_name": "a.png", "text": "a"}\n{"file_name": "b.png", "text": "B edited"}\n')
    store.set_caption(root / "a.png", "A mine")
    store.set_caption(root / "b.png", "B mine")
    report = store.flush()
    assert report.saved == [root / "a.png"]
    assert [c.image for c in report.conflicts] == [root / "b.png"]
    assert '"A mine"' in meta.read_text() and '"B edited"' in meta.read_text()


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="needs POSIX permissions, not root")
def test_read_only_folder_is_refused_and_text_kept(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "old"})
    store = store_for(root)
    root.chmod(0o555)
    (root / "a.txt").chmod(0o444)
    try:
        assert "read-only" in (store.write_refusal(root / "a.png") or "")
        store.set_caption(root / "a.png", "typed")
        report = store.flush()
        (error,) = report.errors
        assert "a.png" in str(error) and "read-only" in str(error) and "Your text is kept" in str(error)
        assert store.pending == [root / "a.png"] and store.caption(root / "a.png") == "typed"
    finally:
        root.chmod(0o755)
    assert (root / "a.txt").read_text() == "old"


def test_non_utf8_file_is_only_rewritten_when_edited(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": None, "b.png": None})
    (root / "a.txt").write_bytes("caf\xe9".encode("latin-1"))
    (root / "b.txt").write_bytes("cr\xe8me".encode("latin-1"))
    store = store_for(root)
    store.set_caption(root / "a.png", "café au lait")
    store.flush()
    assert (root / "a.txt").read_bytes() == "café au lait".encode()
    assert (root / "b.txt").read_bytes() == "cr\xe8me".encode("latin-1")


def test_many_saves_in_one_batch(make_dataset: MakeDataset) -> None:
    root = make_dataset({f"i{n}.png": f"c{n}" for n in range(20)})
    store = store_for(root)
    for image in list(store.entries):
        store.set_caption(image, "t, " + (store.caption(image) or ""))
    assert len(store.flush().saved) == 20
    assert (root / "i7.txt").read_text() == "t, c7"


def test_write_failure_keeps_text_pending(make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-only case as seen by a root user: the write itself is refused."""
    root = make_dataset({"a.png": "old"})
    store = store_for(root)

    def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("studio.core.dataset.captions.caption_files._create_temp", refuse)
    store.set_caption(root / "a.png", "typed")
    (error,) = store.flush().errors
    assert "read-only" in str(error) and str(root / "a.txt") in str(error)
    assert store.pending == [root / "a.png"]
    monkeypatch.undo()
    assert store.flush().saved == [root / "a.png"]
    assert (root / "a.txt").read_text() == "typed"
