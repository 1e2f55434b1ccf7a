"""The Concepts tab edits the dataset's list settings: folders, captions source, DreamBooth prompts,
class images; a refused value says why and nothing is saved; a run trains on what was written."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtCore import Qt

from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import load_config
from studio.gui.dataset.page import DatasetPage


def _type(qtbot, line, text: str) -> None:  # type: ignore[no-untyped-def]
    line.setFocus()
    line.selectAll()
    qtbot.keyClick(line, Qt.Key.Key_Backspace)
    qtbot.keyClicks(line, text)
    qtbot.keyClick(line, Qt.Key.Key_Return)


def test_add_edit_and_remove_concepts(qtbot, page: DatasetPage) -> None:  # type: ignore[no-untyped-def]
    project = page.context.project
    assert project is not None
    extra = project.root / "more"
    extra.mkdir()
    Image.new("RGB", (32, 48)).save(extra / "x.png")
    page.concepts_panel.sig_add_folder.emit(extra)  # what "Add folder…" emits once a folder is chosen
    assert [c.path for c in load_config(project.config_path).dataset.concepts] == ["images", "more"]
    assert page.wait_loaded(30) and page.model.rowCount() == 5  # the new folder's image is in the grid

    panel = page.concepts_panel
    row = next(r for r, found in enumerate(panel.rows) if found[0] == 1)
    panel.table.setCurrentCell(row, 0)
    details = panel.details
    assert details.path.text() == "more"
    _type(qtbot, details.instance_prompt, "a photo of sks dog")
    _type(qtbot, details.class_prompt, "a photo of a dog")
    details.num_class_images.setValue(20)
    details.num_class_images.editingFinished.emit()
    details.prior_loss_weight.setValue(0.5)
    details.prior_loss_weight.editingFinished.emit()
    saved = load_config(project.config_path).dataset.concepts[1]
    assert (saved.instance_prompt, saved.class_prompt, saved.num_class_images, saved.prior_loss_weight) == (
        "a photo of sks dog", "a photo of a dog", 20, 0.5)
    assert saved.uses_prior_preservation

    # Class images need a class prompt: emptied, it is refused with the reason, and nothing is saved.
    before = project.config_path.read_text()
    _type(qtbot, details.class_prompt, "")
    assert "class_prompt is empty" in details.problem.text()
    assert project.config_path.read_text() == before

    panel.table.setCurrentCell(row, 0)
    panel.remove_button.click()
    assert [c.path for c in load_config(project.config_path).dataset.concepts] == ["images"]
    assert (extra / "x.png").exists()  # removing a concept leaves its images alone


def test_a_run_trains_on_the_concepts_written(qtbot, page: DatasetPage, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from studio.core.runs.launch import prepare_run

    project = page.context.project
    assert project is not None
    panel = page.concepts_panel
    panel.table.setCurrentCell(0, 0)
    _type(qtbot, panel.details.instance_prompt, "a photo of sks shape")
    panel.details.caption_source.setCurrentIndex(panel.details.caption_source.findData("prompt"))
    panel.details.caption_source.activated.emit(panel.details.caption_source.currentIndex())
    assert page.context.config is not None
    plan = prepare_run(resolve_paths(page.context.config, project.root))
    resolved = load_config(plan.run_dir / "config.toml").dataset.concepts[0]
    assert resolved.instance_prompt == "a photo of sks shape" and resolved.caption_source == "prompt"
