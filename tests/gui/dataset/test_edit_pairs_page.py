"""The Dataset page on a project of edit pairs: each target is shown with its control image beside it, the
control images are not grid items, the instruction typed under them is saved to the target's caption file,
and a target without its control is named in the Problems tab."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from studio.core.project.folder import Project, create_project
from studio.gui.dataset.editor.editor import INSTRUCTION_PLACEHOLDER
from studio.gui.dataset.page import DatasetPage
from tests.gui.dataset.conftest import open_page


@pytest.fixture
def pairs_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv("STUDIO_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "pairs"
    (folder / "control").mkdir(parents=True)
    for i, name in enumerate(("cat", "dog", "owl")):
        Image.new("RGB", (96, 64), (60 * i, 100, 200)).save(folder / f"{name}.png")
        if name != "owl":  # the owl's control is missing
            Image.new("RGB", (96, 64), (60 * i, 200, 100)).save(folder / "control" / f"{name}.png")
    (folder / "cat.txt").write_text("paint it blue", encoding="utf-8")
    # A new project on the folder, as the project wizard makes one: the control/ folder makes it edit pairs.
    project = create_project(tmp_path / "proj", images=[folder])
    assert project.load_config().dataset.kind == "edit"
    return project


@pytest.fixture
def pairs_page(qtbot, pairs_project: Project, tmp_path: Path) -> DatasetPage:  # type: ignore[no-untyped-def]
    return open_page(qtbot, pairs_project, tmp_path)


def test_a_target_shows_beside_its_control_and_its_instruction_is_saved(  # type: ignore[no-untyped-def]
        qtbot, pairs_page: DatasetPage, pairs_project: Project) -> None:
    folder = pairs_project.root.parent / "pairs"
    assert pairs_page.model.paths == [folder / "cat.png", folder / "dog.png", folder / "owl.png"]
    editor = pairs_page.editor
    assert editor.entry is not None and editor.entry.path == folder / "cat.png"
    control = editor.control_views[0]
    assert editor.wait_preview()  # decoded on the preview thread
    assert control.isVisible() and not editor.preview.pixmap().isNull() and not control.pixmap().isNull()
    assert control.pixmap().toImage().pixelColor(0, 0).green() == 200  # the control's picture, not the target's
    assert control.geometry().right() < editor.preview.geometry().left()  # side by side: control, then target
    assert editor.text.toPlainText() == "paint it blue" and editor.text.placeholderText() == INSTRUCTION_PLACEHOLDER
    assert "cat.png → cat.png" in editor.name.text()
    editor.text.selectAll()
    qtbot.keyClicks(editor.text, "paint it red")
    qtbot.waitUntil(lambda: (folder / "cat.txt").read_text(encoding="utf-8") == "paint it red", timeout=5000)


def test_a_target_without_its_control_says_so_and_is_named_in_problems(pairs_page: DatasetPage,
                                                                       pairs_project: Project) -> None:
    owl = pairs_project.root.parent / "pairs" / "owl.png"
    pairs_page.select_path(owl)
    view = pairs_page.editor.control_views[0]
    assert pairs_page.editor.wait_preview()
    assert view.isVisible() and view.pixmap().isNull() and "No control image" in view.text()
    missing = [p for p in pairs_page.problems if p.code == "missing_control"]
    assert [(p.path, p.severity) for p in missing] == [(str(owl), "error")]
    assert str(owl.parent / "control" / "owl.png") in missing[0].hint
    assert pairs_page.status_label.text().startswith("3 edit pairs, 1 error, ")  # small, uncaptioned: warnings
