"""Caption with…: proposals reviewed beside the person's captions, accepted or rejected, undone in one step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fixtures.fake_hub import FakeHub
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from studio.core.dataset.captions.auto_caption import MachineCaption, ScoredTag
from studio.core.dataset.captions.captioner_models import KNOWN_CAPTIONERS, find_captioner
from studio.core.user_dirs import cache_dir
from studio.gui.dataset.captions.job import CaptionJob
from studio.gui.dataset.captions.review import CaptionReviewDialog
from studio.gui.dataset.page import DatasetPage

LEFT = Qt.MouseButton.LeftButton


def _on_disk(page: DatasetPage) -> dict[str, str | None]:
    assert page.save_now()
    folder = page.context.project.root / "images"  # type: ignore[union-attr]
    return {name: ((folder / name).with_suffix(".txt").read_text(encoding="utf-8")
                   if (folder / name).with_suffix(".txt").exists() else None) for name in "abcd"}


def _tags(image: Path) -> MachineCaption:
    return MachineCaption(image, tags=(ScoredTag("outdoors", 0.9), ScoredTag("square", 0.8),
                                       ScoredTag("simple background", 0.5), ScoredTag("miku", 0.9, "character")))


def _select(dialog: CaptionReviewDialog, *names: str) -> None:
    dialog.table.clearSelection()
    for row, image in enumerate(dialog.rows):
        if image.stem in names:
            dialog.table.selectRow(row)


def _row(dialog: CaptionReviewDialog, name: str) -> int:
    return [image.stem for image in dialog.rows].index(name)


def test_accept_one_reject_one_accept_all_then_one_undo_restores_every_caption(page: DatasetPage, qtbot) -> None:  # type: ignore[no-untyped-def]
    before = _on_disk(page)
    dialog = page.open_caption_dialog()
    assert dialog is not None
    for image in sorted(page.store.entries):  # type: ignore[union-attr]
        dialog.add_proposal(_tags(image))
    # fill-missing: only c (no caption) gets one; the others are left as they are.
    assert [dialog.table.item(r, 2).text() for r in range(4)] == [
        "(left as it is)", "(left as it is)", "miku, outdoors, square, simple background", "(left as it is)"]
    dialog.mode.setCurrentIndex(dialog.mode.findData("append"))
    dialog.prefix.setText("sks")
    dialog.blacklist.setText("outdoors")
    qtbot.waitUntil(lambda: dialog.table.item(_row(dialog, "a"), 2).text() == "sks, red, square, miku, "
                    "simple background", timeout=2000)
    assert dialog.table.item(_row(dialog, "a"), 3).text() == "11"  # tokens
    dialog.table.setCurrentCell(_row(dialog, "a"), 0)
    dialog.general.setValue(60)  # the live preview drops the tag scored 0.5
    assert dialog.preview.text() == "sks, red, square, miku"
    assert dialog.preview_tokens.text() == "7 / 75 tokens"
    qtbot.waitUntil(lambda: not dialog.preview_image.pixmap().isNull(), timeout=5000)  # decoded off the GUI thread
    assert _on_disk(page) == before  # nothing written by reviewing

    _select(dialog, "b")
    qtbot.mouseClick(dialog.reject_button, LEFT)
    _select(dialog, "a")
    qtbot.mouseClick(dialog.accept_button, LEFT)
    assert [image.stem for image in dialog.rows] == ["c", "d"]
    qtbot.mouseClick(dialog.accept_all_button, LEFT)
    assert dialog.rows == [] and dialog.table.rowCount() == 0 and not dialog.proposals
    assert page.undo_stack.count() == 2
    assert [page.undo_stack.text(i) for i in range(2)] == ["Caption 1 image", "Caption 2 images"]
    written = _on_disk(page)
    assert written == {"a": "sks, red, square, miku", "b": before["b"], "c": "sks, miku, square",
                       "d": "sks, green, square, miku"}

    page.undo_stack.undo()  # the accept-all step: c and d as they were (c's new sidecar removed)
    assert _on_disk(page) == {**written, "c": None, "d": before["d"]}
    page.undo_stack.undo()
    assert _on_disk(page) == before
    dialog.close()


def test_images_the_job_left_out_stay_named_once_it_is_done(page: DatasetPage, qtbot) -> None:  # type: ignore[no-untyped-def]
    """"Done: 3 captions to review" alone would hide the picture that could not be read."""
    dialog = page.open_caption_dialog()
    assert dialog is not None
    images = sorted(page.store.entries)  # type: ignore[union-attr]
    unreadable = f"Cannot read {images[1]}: cannot identify image file. The image was skipped; fix or remove it."
    dialog.job.sig_warning.emit(unreadable)
    for image in (images[0], images[2], images[3]):
        dialog.job.sig_caption.emit(_tags(image))
    dialog.job.sig_finished.emit("completed", "")
    assert dialog.status.text() == f"Done: 3 captions to review. 1 problem: {unreadable}"
    dialog.close()


def test_a_job_that_cannot_start_says_which_program(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = CaptionJob()
    with qtbot.waitSignal(job.sig_finished, timeout=10000) as finished:
        job.start(str(tmp_path / "no-python"), tmp_path, "blip-base", "fill-missing", [tmp_path / "a.png"])
    assert finished.args[0] == "failed" and "Could not start" in finished.args[1] and "launch.python" in finished.args[1]
    assert not job.running and not list((cache_dir() / "caption-jobs").glob("images-*.txt"))


@pytest.mark.slow
def test_the_dataset_page_captions_all_images_with_a_tagger_in_another_process(  # type: ignore[no-untyped-def]
        page: DatasetPage, qtbot, tiny_tagger: Path) -> None:
    before = _on_disk(page)
    dialog = page.open_caption_dialog()
    assert dialog is not None and dialog.python == sys.executable
    dialog.model.setCurrentText(str(tiny_tagger))
    dialog.scope.setCurrentIndex(dialog.scope.findData("All images"))
    dialog.mode.setCurrentIndex(dialog.mode.findData("replace"))
    dialog.prefix.setText("sks")
    qtbot.mouseClick(dialog.start_button, LEFT)
    assert dialog.job.running and not dialog.start_button.isEnabled()
    qtbot.waitUntil(lambda: not dialog.job.running, timeout=60000)
    assert dialog.status.text() == "Done: 4 captions to review.", dialog.status.text()
    assert dialog.progress.value() == dialog.progress.maximum() == 4 and len(dialog.rows) == 4
    assert _on_disk(page) == before  # the job wrote nothing
    dialog.table.setCurrentCell(0, 0)
    assert dialog.preview.text().startswith("sks, hatsune miku, ")
    assert dialog.general.isEnabled()
    qtbot.mouseClick(dialog.accept_all_button, LEFT)
    written = _on_disk(page)
    assert all(text is not None and text.startswith("sks, hatsune miku, ") for text in written.values())
    page.undo_stack.undo()
    assert _on_disk(page) == before


def test_the_model_list_offers_every_known_captioner_with_its_size_and_where_to_put_it(  # type: ignore[no-untyped-def]
        page: DatasetPage, qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing downloaded: the 7 captioners the studio knows are offered with their size; choosing one
    says where its files go (no command-line wording), and Start starts nothing."""
    from studio.core.dataset.captions.captioner_models import captioners_dir

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    dialog = page.open_caption_dialog()
    assert dialog is not None
    shown = [dialog.model.itemText(i) for i in range(dialog.model.count())]
    assert len(shown) == len(KNOWN_CAPTIONERS) == 7
    for text, name in zip(shown, ("blip-base", "blip-large", "florence2-base", "florence2-large", "wd14-vit-v3",
                                  "wd14-swinv2-v3", "wd14-eva02-large-v3"), strict=True):
        assert text.startswith(f"{name} — ") and " GB" in text and text.endswith("not downloaded")
    dialog.model.setCurrentIndex(dialog.model.findData("wd14-vit-v3"))
    status = dialog.status.text()
    assert "SmilingWolf/wd-vit-tagger-v3" in status and str(captioners_dir() / "wd14-vit-v3") in status
    assert "Folder…" in status and "--model" not in status
    dialog.start_button.click()
    assert not dialog.job.running and dialog.status.text() == status
    dialog.close()


def test_download_fetches_a_known_captioner_from_the_hub_and_the_list_then_has_it(  # type: ignore[no-untyped-def]
        page: DatasetPage, qtbot, fake_hub: FakeHub, tiny_tagger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A known tagger not on this machine: Download fetches only the files it loads (not the repository's
    timm weights or README) into the hub cache; the list stops saying "not downloaded" and Start may go."""
    repo = "SmilingWolf/wd-vit-tagger-v3"
    files = {name: (tiny_tagger / name).read_bytes() for name in ("model.onnx", "selected_tags.csv")}
    fake_hub.repos[repo] = {**files, "model.safetensors": bytes(4096), "config.json": b"{}", "README.md": b"# tagger"}
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    dialog = page.open_caption_dialog()
    assert dialog is not None
    download = dialog.findChild(QPushButton, "caption_download")
    dialog.model.setCurrentIndex(dialog.model.findData("wd14-vit-v3"))
    assert download.isEnabled() and "Press Download" in dialog.status.text()
    qtbot.mouseClick(download, LEFT)
    picker = dialog.picker
    assert picker.download_dialog is not None
    with qtbot.waitSignal(picker.sig_downloaded, timeout=60000):
        pass
    assert dialog.status.text() == "wd14-vit-v3 is downloaded: press Start to caption with it."
    assert dialog.model.currentText() == next(k.title for k in KNOWN_CAPTIONERS if k.name == "wd14-vit-v3")
    assert not download.isEnabled() and dialog.not_here() == ""
    fetched = {r.path.rsplit("/", 1)[-1] for r in fake_hub.requests if r.method == "GET" and "/resolve/" in r.path}
    assert fetched == {"model.onnx", "selected_tags.csv"}
    source = find_captioner("wd14-vit-v3")
    assert source.kind == "wd14" and (source.folder / "model.onnx").read_bytes() == files["model.onnx"]
    dialog.close()


def test_proposals_outlive_a_setting_changed_while_the_model_captions(page: DatasetPage, qtbot) -> None:  # type: ignore[no-untyped-def]
    """Any dataset setting (or the model family) changed on the Model page reads the dataset again; that closed
    Caption with…, killed its job and dropped every proposal not yet accepted: an hour of captioning gone."""
    dialog = page.open_caption_dialog()
    assert dialog is not None
    folder = page.context.project.root / "images"  # type: ignore[union-attr]
    dialog.add_proposal(_tags(folder / "c.png"))
    config = page.context.config.model_copy(deep=True)  # type: ignore[union-attr]
    config.dataset.shuffle_tags = not config.dataset.shuffle_tags
    page.context.set_config(config)
    assert not dialog.accept_button.isEnabled()  # while the dataset is read again
    dialog.add_proposal(_tags(folder / "a.png"))  # the job goes on meanwhile
    assert page.wait_loaded(30)
    assert page.tools.dialog is dialog and dialog.isVisible()
    assert dialog.store is page.store and dialog.accept_all_button.isEnabled()
    assert dialog.accept_rows(list(range(len(dialog.rows)))) == 1  # fill-missing: c only
    assert _on_disk(page)["c"] == "miku, outdoors, square, simple background"


def test_opening_another_project_closes_caption_with(page: DatasetPage, qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from studio.core.project.folder import create_project, default_config

    dialog = page.open_caption_dialog()
    assert dialog is not None
    other = create_project(tmp_path / "other", default_config("images"))
    (other.root / "images").mkdir()
    page.context.set_project(other)
    assert page.tools.dialog is None


def test_caption_with_pressed_again_keeps_the_proposals_not_yet_reviewed(page: DatasetPage, qtbot) -> None:  # type: ignore[no-untyped-def]
    """Proposals for some images, then other images selected in the grid and Caption with… pressed again: the
    same window comes back with its proposals, and offers the images selected now."""
    dialog = page.open_caption_dialog()
    assert dialog is not None
    for image in sorted(page.store.entries):  # type: ignore[union-attr]
        dialog.add_proposal(_tags(image))
    page.select_path(sorted(page.store.entries)[1])  # type: ignore[union-attr]
    again = page.open_caption_dialog()
    assert again is dialog and again.isVisible()
    assert [image.stem for image in again.rows] == ["a", "b", "c", "d"]
    assert again.scope.itemText(again.scope.findData("Selected images")) == "Selected images (1)"
    assert again.scopes["Selected images"] == [sorted(page.store.entries)[1]]  # type: ignore[union-attr]
    dialog.close()


def test_escape_or_close_while_captioning_asks_before_the_job_is_stopped(page: DatasetPage, qtbot) -> None:  # type: ignore[no-untyped-def]
    """Escape pressed in the trigger-word field closed the window and killed an hour's captioning unasked."""
    from studio.gui.dataset.captions.job import CAPTION_MESSAGES

    dialog = page.open_caption_dialog()
    assert dialog is not None
    # A process that holds until it is ended, in the job's place.
    assert dialog.job.process.start_messages([sys.executable, "-c", "import sys; sys.stdin.read()"], CAPTION_MESSAGES)
    dialog.add_proposal(_tags(sorted(page.store.entries)[0]))  # type: ignore[union-attr]
    asked: list[bool] = []
    dialog.confirm_stop = lambda: asked.append(True) or False  # type: ignore[method-assign]
    qtbot.keyClick(dialog.prefix, Qt.Key.Key_Escape)
    dialog.findChild(QPushButton, "caption_close").click()
    dialog.close()  # the title bar's cross
    assert len(asked) == 3 and dialog.isVisible() and dialog.job.running
    dialog.confirm_stop = lambda: asked.append(True) or True  # type: ignore[method-assign]
    dialog.findChild(QPushButton, "caption_close").click()
    assert not dialog.isVisible() and not dialog.job.running
    assert page.open_caption_dialog() is dialog and len(dialog.rows) == 1  # the proposal made stays to review
    dialog.close()


def test_thousands_of_rows_follow_a_rule_a_slice_at_a_time(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QSettings

    from studio.core.dataset.captions.caption_store import CaptionStore
    from studio.core.dataset.scan import ImageEntry
    from studio.gui.context import StudioContext
    from studio.gui.dataset.captions.review import REFILL_SLICE

    entries = [ImageEntry(tmp_path / f"{i:05d}.png", "red", None, "txt", 1, str(tmp_path))
               for i in range(2 * REFILL_SLICE + 10)]
    dialog = CaptionReviewDialog(CaptionStore(entries), [], lambda edits, title: None,
                                 StudioContext(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(dialog)
    dialog.mode.setCurrentIndex(dialog.mode.findData("append"))
    for entry in entries:
        dialog.add_proposal(_tags(entry.path))
    last = len(entries) - 1
    assert dialog.table.item(last, 2).text().startswith("red, miku, ")
    dialog.prefix.setText("sks")
    dialog._table_timer.stop()
    dialog._refill_table()  # what the pause after the typing starts
    assert dialog.table.item(0, 2).text().startswith("sks, red, miku, ")
    assert dialog.table.item(last, 2).text().startswith("red, miku, ")  # the window goes on meanwhile
    qtbot.waitUntil(lambda: dialog.table.item(last, 2).text().startswith("sks, red, miku, "), timeout=10000)
    dialog.close()
