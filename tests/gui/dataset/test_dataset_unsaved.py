"""Captions a person typed are never dropped without a word: not when the dataset is read again."""

from __future__ import annotations

import json
import os
from pathlib import Path

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
