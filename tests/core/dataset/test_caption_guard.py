"""Caption saves that cannot overwrite a newer edit, and the clean-up of what killed saves left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from dataset_files import MakeDataset

from studio.core.config.schema import ConceptSection
from studio.core.dataset.captions import caption_files, caption_guard
from studio.core.dataset.captions.caption_guard import FOLDER_LOCK, folder_locks, remove_caption_leftovers
from studio.core.dataset.captions.caption_store import CaptionStore
from studio.core.dataset.scan import scan_concept

REPO = Path(__file__).resolve().parents[3]


def _store(root: Path) -> CaptionStore:
    return CaptionStore(scan_concept(ConceptSection(path=str(root))))


def _foreign_rename(path: Path, text: str) -> None:
    """Another program saving the way most editors do: a new file renamed over the old one."""
    tmp = path.with_name(path.name + ".editor")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _foreign_in_place(path: Path, text: str) -> None:
    """Another program writing into the file itself (truncate and write)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _edit_during_fsync(monkeypatch: pytest.MonkeyPatch, edit: Callable[[], None]) -> None:
    """Run `edit` once, while the save syncs its new file: after its check, before its rename."""
    real_fsync = os.fsync
    done = threading.Event()

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if not done.is_set():
            done.set()
            edit()

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("write", [_foreign_rename, _foreign_in_place], ids=["renamed", "in-place"])
def test_an_edit_landing_between_the_check_and_the_rename_is_a_conflict(
        make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch, write: Callable[[Path, str], None]) -> None:
    root = make_dataset({"a.png": "a red square"})
    store = _store(root)
    store.set_caption(root / "a.png", "the machine's caption")
    _edit_during_fsync(monkeypatch, lambda: write(root / "a.txt", "the person's edit"))
    report = store.flush()
    assert (root / "a.txt").read_text(encoding="utf-8") == "the person's edit"
    assert report.saved == []
    assert [(c.file, c.disk_text) for c in report.conflicts] == [(root / "a.txt", "the person's edit")]


def test_a_sidecar_created_elsewhere_while_ours_was_written_is_kept(
        make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_dataset({"a.png": None})
    store = _store(root)
    store.set_caption(root / "a.png", "ours")
    _edit_during_fsync(monkeypatch, lambda: _foreign_rename(root / "a.txt", "theirs"))
    report = store.flush()
    assert (root / "a.txt").read_text(encoding="utf-8") == "theirs"
    assert [c.disk_text for c in report.conflicts] == ["theirs"]


def test_a_change_just_before_the_swap_is_undone_and_reported(
        make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch) -> None:
    if caption_guard._RENAMEAT2 is None:
        pytest.skip("no renameat2 here: the snapshot is compared right before os.replace instead")
    root = make_dataset({"a.png": "old"})
    store = _store(root)
    store.set_caption(root / "a.png", "ours")
    real = caption_guard._exchange
    calls = []

    def exchange(a: str, b: str) -> bool:
        if not calls:
            _foreign_rename(root / "a.txt", "theirs, a microsecond earlier")
        calls.append(b)
        return real(a, b)

    monkeypatch.setattr(caption_guard, "_exchange", exchange)
    report = store.flush()
    assert len(calls) == 2  # swapped in, found the file changed, swapped back
    assert (root / "a.txt").read_text(encoding="utf-8") == "theirs, a microsecond earlier"
    assert [c.disk_text for c in report.conflicts] == ["theirs, a microsecond earlier"]
    assert sorted(p.name for p in root.iterdir()) == [FOLDER_LOCK, "a.png", "a.txt"]  # no temporary file left


def test_metadata_rows_changed_elsewhere_meanwhile_are_kept_with_ours(
        make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_dataset({"a.png": None, "b.png": None})
    jsonl = root / "metadata.jsonl"
    jsonl.write_text('{"file_name": "a.png", "text": "a"}\n{"file_name": "b.png", "text": "b"}\n', encoding="utf-8")
    store = _store(root)
    store.set_caption(root / "a.png", "a, by the studio")
    theirs = '{"file_name": "a.png", "text": "a"}\n{"file_name": "b.png", "text": "b, by another program"}\n'
    _edit_during_fsync(monkeypatch, lambda: _foreign_rename(jsonl, theirs))
    report = store.flush()
    rows = [json.loads(line)["text"] for line in jsonl.read_text(encoding="utf-8").splitlines()]
    assert rows == ["a, by the studio", "b, by another program"]
    assert report.saved == [root / "a.png"] and not report.conflicts


def test_a_save_waits_while_another_studio_writer_holds_the_folder(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "old"})
    store = _store(root)
    store.set_caption(root / "a.png", "new")
    finished = threading.Event()
    with folder_locks([root]):
        saver = threading.Thread(target=lambda: (store.flush(), finished.set()))
        saver.start()
        assert not finished.wait(0.3)  # the other writer is between its check and its rename
        assert (root / "a.txt").read_text(encoding="utf-8") == "old"
    assert finished.wait(30)
    saver.join()
    assert (root / "a.txt").read_text(encoding="utf-8") == "new"


# ------------------------------------------------------------ leftovers of killed saves

_KILLED_SAVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from studio.core.dataset.captions.caption_store import CaptionStore
    from studio.core.config.schema import ConceptSection
    from studio.core.dataset.scan import scan_concept

    root = Path(sys.argv[1])
    real_fsync = os.fsync
    def fsync(fd):
        real_fsync(fd)
        os.write(1, b"syncing\\n")  # one write: saves run on several threads, each says it once
        time.sleep(600)  # killed here: the temporary files are written, nothing is renamed yet
    os.fsync = fsync
    store = CaptionStore(scan_concept(ConceptSection(path=str(root))))
    for image in sorted(root.glob("*.png")):
        store.set_caption(image, "never saved")
    store.flush()
""")


def _kill_while_saving(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", _KILLED_SAVER, str(root)], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "syncing"
        deadline = time.monotonic() + 30
        while not any(p.name.endswith(".tmp") for p in root.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_temporary_files_of_killed_saves_are_removed_when_the_folder_is_opened(make_dataset: MakeDataset) -> None:
    root = make_dataset({f"{i:02d}.png": f"caption {i}" for i in range(12)})
    for _kill in range(3):
        _kill_while_saving(root)
    left = sorted(p for p in root.iterdir() if p.name.endswith(".tmp"))
    assert left, "the killed saves left no temporary file: the test did not kill them mid-save"
    assert all(caption_guard._is_caption_temp(p.name, {".txt"}) for p in left)
    store = _store(root)  # opening the folder, as the Dataset page and `studio-train caption` do
    assert store.remove_leftovers() == left
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]
    assert all((root / f"{i:02d}.txt").read_text(encoding="utf-8") == f"caption {i}" for i in range(12))


def test_the_clean_up_never_touches_a_live_writers_files(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    caption_temp = tmp_path / ".a.txt.0badcafe.tmp"  # being written by a save that holds the lock
    other_temp = tmp_path / ".studio.toml.k3x_9zqa.tmp"  # another writer's, which takes no caption lock
    caption_temp.write_text("being written", encoding="utf-8")
    other_temp.write_text("being written", encoding="utf-8")
    with folder_locks([tmp_path]):
        assert remove_caption_leftovers([tmp_path]) == []
    assert remove_caption_leftovers([tmp_path]) == [caption_temp]  # the lock is free: that one was left behind
    assert other_temp.exists()  # young, and not the caption writer's: only age lets it go
    old = time.time() - 3600
    os.utime(other_temp, (old, old))
    assert remove_caption_leftovers([tmp_path]) == [other_temp]
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "a"


def test_an_interrupted_save_removes_its_own_temporary_files(
        make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_dataset({"a.png": "a", "b.png": "b"})
    store = _store(root)
    store.set_caption(root / "a.png", "new a")
    store.set_caption(root / "b.png", "new b")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.flush()
    assert sorted(p.name for p in root.iterdir()) == [FOLDER_LOCK, "a.png", "a.txt", "b.png", "b.txt"]
    assert (root / "a.txt").read_text(encoding="utf-8") == "a"


def test_the_caption_of_an_image_with_a_long_name_is_saved(make_dataset: MakeDataset) -> None:
    """80 Japanese characters are 240 bytes, within the 255 a file name may have; the temporary file
    written first must fit too."""
    name = "猫" * 80
    root = make_dataset({f"{name}.png": "old"})
    store = _store(root)
    image = root / f"{name}.png"
    store.set_caption(image, "a cat")
    report = store.flush()
    assert report.errors == [] and report.saved == [image]
    assert (root / f"{name}.txt").read_text(encoding="utf-8") == "a cat"
    assert sorted(p.name for p in root.iterdir() if p.name != caption_guard.FOLDER_LOCK) == [f"{name}.png", f"{name}.txt"]
    long_temp = caption_files._temp_name(f"{name}.txt")
    assert len(os.fsencode(long_temp)) <= 255 and caption_guard._is_caption_temp(long_temp, {".txt"})


def test_a_caption_whose_folder_was_moved_away_says_to_read_the_dataset_again(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": None})
    store = _store(root)
    root.rename(root.with_name("renamed in a file manager"))
    store.set_caption(root / "a.png", "a cat")
    report = store.flush()
    assert [str(e) for e in report.errors] == [
        f"Cannot save the caption of a.png to {root / 'a.txt'}: No such file or directory. Your text is kept in the "
        "studio; its folder was moved, renamed or deleted since the dataset was read: read the dataset again (Reload "
        "on the Dataset page; captions that cannot be saved then go to a recovery file)."]
    assert store.has_pending and not root.exists()
