"""The pieces that let the studio work in the background: two-step scan, save batches, helper-process loops."""

from __future__ import annotations

import multiprocessing
import os
import stat
import sys
from pathlib import Path

import pytest
from dataset_files import MakeDataset, make_image
from PIL import Image

from studio.core.config.schema import ConceptSection
from studio.core.dataset.captions.caption_store import CaptionStore
from studio.core.dataset.checks import check_worker
from studio.core.dataset.layouts import rename_repeat_folder
from studio.core.dataset.scan import DatasetError, list_concept, read_captions, scan_concept
from studio.core.dataset.thumbnails import make_thumbnail, thumbnail_worker


def test_listing_comes_before_captions_in_the_same_order(make_dataset: MakeDataset) -> None:
    root = make_dataset({"b10.png": "ten", "b2.png": "two", "3_dog/a.png": None, "3_dog/c.png": "c"})
    listing = list_concept(ConceptSection(path=str(root)))
    names = [p.relative_to(root).as_posix() for p in listing.paths]
    assert names == ["3_dog/a.png", "3_dog/c.png", "b2.png", "b10.png"]
    assert all(e.caption is None for e in listing.result.entries)  # nothing read yet
    result = read_captions(listing)
    assert [e.caption for e in result.entries] == ["dog", "c", "two", "ten"]
    assert [e.path for e in result.entries] == [e.path for e in scan_concept(ConceptSection(path=str(root)))]
    assert result.repeat_folders == {root / "3_dog": 2}


def test_rename_repeat_folder(tmp_path: Path) -> None:
    folder = tmp_path / "5_sks_dog"
    make_image(folder / "a.png")
    moved = rename_repeat_folder(folder, 12)
    assert moved == tmp_path / "12_sks_dog" and (moved / "a.png").exists() and not folder.exists()
    (tmp_path / "3_sks_dog").mkdir()
    with pytest.raises(DatasetError, match="3_sks_dog: that folder already exists"):
        rename_repeat_folder(moved, 3)
    with pytest.raises(DatasetError, match="not a kohya repeat folder"):
        rename_repeat_folder(tmp_path, 2)


def test_edit_made_while_a_batch_is_saving_is_kept(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "old", "b.png": "keep"})
    store = CaptionStore(scan_concept(ConceptSection(path=str(root))))
    image = root / "a.png"
    store.set_caption(image, "first")
    batch = store.begin_save()
    assert store.saving and len(batch) == 1
    store.set_caption(image, "second")  # typed while the worker writes "first"
    assert not len(store.begin_save())  # the same file is never written twice at once
    batch.run()
    report = store.finish_save(batch)
    assert report.saved == [image] and (root / "a.txt").read_text() == "first"
    assert store.pending == [image]  # "second" is still to be written, not lost
    assert store.flush().saved == [image]
    assert (root / "a.txt").read_text() == "second" and not store.has_pending


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_saving_keeps_the_file_mode_and_new_files_are_readable(make_dataset: MakeDataset) -> None:
    root = make_dataset({f"i{n}.png": "x" for n in range(12)} | {"new.png": None})
    (root / "i3.txt").chmod(0o640)
    store = CaptionStore(scan_concept(ConceptSection(path=str(root))))
    for image in store.entries:
        store.set_caption(image, "y")
    assert len(store.flush().saved) == 13  # a batch large enough for the one-sync path
    assert stat.S_IMODE((root / "i3.txt").stat().st_mode) == 0o640
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((root / "new.txt").stat().st_mode) == 0o666 & ~umask
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


def test_check_worker_sends_progress_problems_buckets_done(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "one", "b.png": None})
    parent, child = multiprocessing.Pipe()
    settings = {"resolution": 512, "bucket_step": 64, "min_bucket": 256, "max_bucket": 2048}
    check_worker(child, [ConceptSection(path=str(root)).model_dump(mode="json")], None, settings, nice=0)
    messages = []
    while parent.poll():
        messages.append(parent.recv())
    kinds = [m[0] for m in messages]
    assert kinds[0] == "progress" and kinds[-2:] == ["buckets", "done"] and messages[-1][1] == 2
    rows = [row for m in messages if m[0] == "problems" for row in m[1]]
    codes = sorted((Path(r[2]).name, r[1]) for r in rows)
    assert codes == [("a.png", "too_small"), ("b.png", "missing_caption"), ("b.png", "too_small")]
    assert dict(messages[-2][1]) == {(576, 448): 2}  # 64x48 images land in the 4:3 bucket


def test_check_worker_checks_the_masks_it_is_given(make_dataset: MakeDataset) -> None:
    """The studio's Problems panel names a broken loss mask as check-dataset does."""
    root = make_dataset({"a.png": "one"})
    (root.parent / "masks").mkdir()
    (root.parent / "masks" / "a.png").write_bytes(b"")
    parent, child = multiprocessing.Pipe()
    settings = {"resolution": 32, "bucket_step": 64, "min_bucket": 256, "max_bucket": 2048,
                "mask_folder": str(root.parent / "masks")}
    check_worker(child, [ConceptSection(path=str(root)).model_dump(mode="json")], None, settings, nice=0)
    rows = []
    while parent.poll():
        message = parent.recv()
        rows += message[1] if message[0] == "problems" else []
    assert [(r[0], r[1], r[2]) for r in rows] == [("error", "unreadable_mask", str(root.parent / "masks" / "a.png"))]


def test_check_worker_reports_a_missing_folder(tmp_path: Path) -> None:
    parent, child = multiprocessing.Pipe()
    settings = {"resolution": 512, "bucket_step": 64, "min_bucket": 256, "max_bucket": 2048}
    check_worker(child, [{"path": str(tmp_path / "gone")}], None, settings, nice=0)
    rows = []
    while parent.poll():
        message = parent.recv()
        if message[0] == "problems":
            rows.extend(message[1])
    assert [r[1] for r in rows] == ["folder_missing"] and "does not exist" in rows[0][3]


def test_thumbnails_are_made_cached_and_broken_files_are_none(tmp_path: Path) -> None:
    image = make_image(tmp_path / "wide.png", size=(300, 150))
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    cache = tmp_path / "cache"
    width, height, data = make_thumbnail(image, cache) or (0, 0, b"")
    assert (width, height) == (128, 64) and len(data) == 128 * 64 * 3
    (cached,) = cache.rglob("*.jpg")
    # Paint the cached thumbnail green: a second call must hand back the cache, not decode the image again.
    Image.new("RGB", (128, 64), (0, 255, 0)).save(cached, "JPEG", quality=95)
    written = cached.stat().st_mtime_ns
    again = make_thumbnail(image, cache)
    assert again is not None and again[:2] == (128, 64)
    red, green, blue = again[2][:3]  # the image itself is red (200, 30, 30)
    assert green > 200 and red < 40 and blue < 40
    assert cached.stat().st_mtime_ns == written and len(list(cache.rglob("*.jpg"))) == 1  # not rewritten
    assert make_thumbnail(broken, cache) is None


def test_thumbnail_worker_answers_requests_until_told_to_stop(tmp_path: Path) -> None:
    image = make_image(tmp_path / "a.png")
    parent, child = multiprocessing.Pipe()
    parent.send([("a", str(image)), ("missing", str(tmp_path / "nope.png"))])
    parent.send(None)
    thumbnail_worker(child, str(tmp_path / "cache"), nice=0)
    answer = parent.recv()
    assert [key for key, _ in answer] == ["a", "missing"]
    assert answer[0][1] is not None and answer[0][1][:2] == (64, 48)  # small images are not upscaled
    assert answer[1][1] is None  # the missing file is answered as unreadable, and the helper goes on

