"""A new person's first steps: their own image folder opened as a project, and File → New Project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.checkpoints import SDXL, write_checkpoint
from fixtures.waits import scaled_s
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QSpinBox, QWizard

from studio.core.config.files.presets import list_presets
from studio.gui.context import StudioContext
from studio.gui.shell.application import make_settings
from studio.gui.shell.main_window import MainWindow

ROOT = Path(__file__).resolve().parents[3]


def _pngs(folder: Path, count: int) -> None:
    """`count` images fast: one PNG, hard-linked."""
    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (48, 48), (30, 120, 200)).save(folder / "shape 0.png")
    for i in range(1, count):
        os.link(folder / "shape 0.png", folder / f"shape {i}.png")


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:  # type: ignore[no-untyped-def]
    win = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(win)
    yield win
    win.close()



def _shown_wizard(window: MainWindow, qtbot) -> QWizard:  # type: ignore[no-untyped-def]
    wizard = window.new_project_wizard()
    qtbot.addWidget(wizard)
    wizard.show()
    return wizard

def test_opening_a_kohya_folder_shows_its_images_and_one_concept_with_its_repeats(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    mydata = tmp_path / "mydata"
    _pngs(mydata / "10_shapes", 30)
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda _parent, _title, text: asked.append(text) or QMessageBox.StandardButton.Yes)
    assert window.open_project_path(mydata)
    assert "Found: kohya N_name folders: 1 concept, 30 images (10_shapes: 30 ×10)." in asked[0]
    page = window.show_page("page_dataset")
    assert page.wait_loaded(30)  # type: ignore[attr-defined]
    assert page.model.rowCount() == 30  # type: ignore[attr-defined]
    table = page.concepts_panel.table  # type: ignore[attr-defined]
    assert table.rowCount() == 1
    assert (table.item(0, 0).text(), table.item(0, 1).text()) == ("10_shapes", "30")
    spin = table.cellWidget(0, 2)
    assert isinstance(spin, QSpinBox) and spin.value() == 10
    assert page.status_label.text().startswith("30 images, 0 errors")  # type: ignore[attr-defined]


def test_new_project_wizard_images_model_and_a_preset_that_fits(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setenv("STUDIO_HARDWARE", "rtx3060-12gb")
    photos = tmp_path / "Photos" / "chats été"
    _pngs(photos / "5_mimi", 4)
    _pngs(photos / "2_tom", 2)
    models = tmp_path / "my models"
    models.mkdir()
    checkpoint = write_checkpoint(models / "juggernaut xl.safetensors", SDXL)
    monkeypatch.setenv("STUDIO_MODEL_FOLDERS", str(models))
    wizard = _shown_wizard(window, qtbot)
    pages = wizard  # type: ignore[assignment]
    pages.images_page.folder.setText(str(tmp_path / "projects" / "cat lora"))  # type: ignore[attr-defined]
    pages.images_page.add_image_folder(photos)  # type: ignore[attr-defined]
    assert pages.images_page.layout_label.text() == (  # type: ignore[attr-defined]
        "chats été: kohya N_name folders: 2 concepts, 6 images (2_tom: 2 ×2, 5_mimi: 4 ×5)")
    wizard.next()
    library = pages.model_page.library  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: bool(library.models), timeout=10000)
    row = next(i for i, (_kind, m) in enumerate(library.rows()) if getattr(m, "path", None) == checkpoint)
    library.table.selectRow(row)
    library.use_selected()
    assert pages.model_page.base.text() == str(checkpoint)  # type: ignore[attr-defined]
    assert pages.model_page.family_label.text() == "Family: SDXL"  # type: ignore[attr-defined]
    wizard.next()
    presets = pages.preset_page.list  # type: ignore[attr-defined]
    shown = [presets.item(i).text() for i in range(presets.count())]
    sdxl = [p for p in list_presets() if p.info.family == "sdxl"]
    assert len(shown) == len(sdxl) and all(" — " in text for text in shown)
    fits = [text for text in shown if "— fits this machine" in text]
    assert fits and shown[: len(fits)] == fits  # what fits a 12 GB card comes first
    presets.setCurrentRow(0)
    chosen = presets.item(0).data(Qt.ItemDataRole.UserRole)
    with qtbot.waitSignal(wizard.accepted, timeout=5000):
        wizard.button(QWizard.WizardButton.FinishButton).click()
    project = window.context.project
    assert project is not None and project.root == (tmp_path / "projects" / "cat lora").resolve()
    config = project.load_config()
    assert (config.model.family, config.model.base) == ("sdxl", str(checkpoint))
    assert [(c.path, c.repeats) for c in config.dataset.concepts] == [
        ("../../Photos/chats été/2_tom", 2), ("../../Photos/chats été/5_mimi", 5)]
    assert config.method.kind == chosen.info.method and config.method.rank == chosen.delta["method"]["rank"]


def test_the_wizard_on_a_machine_without_a_gpu_says_the_presets_plan_for_one(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setenv("STUDIO_HARDWARE", "no-gpu")
    wizard = _shown_wizard(window, qtbot)
    wizard.images_page.folder.setText(str(tmp_path / "cpu project"))  # type: ignore[attr-defined]
    wizard.next()
    wizard.next()
    page = wizard.preset_page  # type: ignore[attr-defined]
    shown = [page.list.item(i).text() for i in range(page.list.count())]
    assert shown and not any("fits this machine" in text for text in shown)
    assert all("no GPU here: CPU (very slow); plan for a GPU profile" in text for text in shown)
    assert page.subTitle().startswith("No GPU here") and "Plan for" in page.subTitle()


def test_the_wizard_skipped_makes_a_project_that_trains_as_it_stands(
    window: MainWindow, tmp_path: Path, qtbot  # type: ignore[no-untyped-def]
) -> None:
    wizard = _shown_wizard(window, qtbot)
    wizard.images_page.folder.setText(str(tmp_path / "fresh"))  # type: ignore[attr-defined]
    with qtbot.waitSignal(wizard.accepted, timeout=5000):
        wizard.button(QWizard.WizardButton.FinishButton).click()
    config = window.context.project.load_config()  # type: ignore[union-attr]
    assert (config.model.family, config.model.base) == ("sd15", "stable-diffusion-v1-5/stable-diffusion-v1-5")
    assert [c.path for c in config.dataset.concepts] == ["images"] and (tmp_path / "fresh" / "images").is_dir()


@pytest.mark.slow
def test_self_test_counts_ten_thousand_images_in_a_kohya_folder(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    _pngs(folder / "10_shapes", 10_000)
    out = subprocess.run([sys.executable, "-m", "studio", "--self-test", "--project", str(folder)],
                         capture_output=True, text=True, cwd=ROOT, timeout=scaled_s(120),
                         env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert out.returncode == 0, out.stderr[-2000:]
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["dataset_images"] == 10_000


def test_the_demo_says_what_it_is_and_that_train_is_next(window: MainWindow, tmp_path: Path) -> None:
    from PySide6.QtWidgets import QPushButton

    from studio.core.project.demo import create_demo_project
    from studio.core.project.folder import create_project

    banner = window.demo_banner
    window.set_project(create_demo_project(tmp_path / "demo"))  # the tiny model is not built here
    assert banner.isVisibleTo(window)
    text = banner.text.text()
    assert "demo project" in text and "Next: open Train and press Train" in text and "noise" in text
    banner.findChild(QPushButton, "demo_banner_train").click()
    assert window.stack.currentWidget().objectName() == "page_train"

    window.set_project(create_project(tmp_path / "mine"))  # a project of one's own: no banner
    assert not banner.isVisibleTo(window)
    window.set_project(create_demo_project(tmp_path / "demo"))
    banner.findChild(QPushButton, "demo_banner_hide").click()
    window.set_project(create_project(tmp_path / "mine"))
    window.set_project(create_demo_project(tmp_path / "demo"))
    assert not banner.isVisibleTo(window)  # hidden for good


def test_a_persons_model_folder_named_like_the_tiny_model_is_not_the_demo(window: MainWindow, tmp_path: Path) -> None:
    """A person's own project whose model lives in models/tiny-sd15: no demo banner, and Train does not
    offer to build a random tiny model over their folder."""
    from studio.core.config.schema import TrainConfig
    from studio.core.project.folder import create_project

    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "models/tiny-sd15"},
                                         "dataset": {"concepts": [{"path": "images"}]}})
    project = create_project(tmp_path / "mine", config)
    _pngs(project.root / "images", 2)
    window.set_project(project)
    assert not window.demo_banner.isVisibleTo(window)
    assert not window.demo_model.needs_building(project)


def test_the_wizard_on_a_folder_that_is_a_project_already_says_so_and_keeps_its_settings(
    window: MainWindow, tmp_path: Path, qtbot  # type: ignore[no-untyped-def]
) -> None:
    from studio.core.project.folder import create_project

    existing = create_project(tmp_path / "my lora")
    before = existing.config_path.read_text(encoding="utf-8")
    wizard = _shown_wizard(window, qtbot)
    wizard.images_page.folder.setText(str(existing.root))  # type: ignore[attr-defined]
    # Finishing would keep its studio.toml and drop the base model and preset chosen in the next steps unsaid.
    qtbot.waitUntil(lambda: "is already a studio project" in wizard.images_page.layout_label.text())  # type: ignore
    assert not wizard.button(QWizard.WizardButton.NextButton).isEnabled()
    assert not wizard.button(QWizard.WizardButton.FinishButton).isEnabled()
    wizard.accept()
    assert window.context.project is None and existing.config_path.read_text(encoding="utf-8") == before


def test_the_wizard_says_why_a_project_folder_cannot_be_written(
    window: MainWindow, tmp_path: Path, qtbot  # type: ignore[no-untyped-def]
) -> None:
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    wizard = _shown_wizard(window, qtbot)
    wizard.images_page.folder.setText(str(tmp_path / "notes.txt" / "lora"))  # type: ignore[attr-defined]
    wizard.next()
    wizard.button(QWizard.WizardButton.FinishButton).click()  # was a traceback, the wizard open and silent
    assert wizard.currentPage() is wizard.images_page  # type: ignore[attr-defined]
    said = wizard.images_page.layout_label.text()  # type: ignore[attr-defined]
    assert said.startswith(f"The project cannot be written in {tmp_path / 'notes.txt' / 'lora'}") and \
        "choose a folder you may write to" in said
    assert window.context.project is None and wizard.isVisible()


def test_opening_an_image_folder_where_no_project_can_be_written_says_why(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    card = tmp_path / "card"
    _pngs(card, 2)
    (card / "runs").write_text("the camera's own file")  # the project's runs/ folder cannot be made
    monkeypatch.setattr(QMessageBox, "question", lambda *_args: QMessageBox.StandardButton.Yes)
    warned: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, _title, text: warned.append(text))
    assert not window.open_project_path(card)
    assert warned and warned[0].startswith(f"No project can be made in {card}") and "File → New Project" in warned[0]
    assert window.context.project is None


def test_typing_the_project_folder_reads_only_the_folder_typed_not_each_one_on_the_way(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    import studio.gui.project.wizard as wizard_module

    target = tmp_path / "cats"
    _pngs(target, 3)
    read: list[Path] = []
    real = wizard_module.detect_layout
    monkeypatch.setattr(wizard_module, "detect_layout", lambda folder: read.append(folder) or real(folder))
    wizard = _shown_wizard(window, qtbot)
    field = wizard.images_page.folder  # type: ignore[attr-defined]
    text = str(target)
    for end in range(1, len(text) + 1):  # key by key: "/" and every parent would be read whole (the disk)
        field.setText(text[:end])
    assert read == []
    qtbot.waitUntil(lambda: "cats: one folder of images" in wizard.images_page.layout_label.text()  # type: ignore
                    or bool(read), timeout=5000)
    assert read == [target]


def test_a_hub_id_typed_in_the_wizard_gives_the_project_its_family(
    window: MainWindow, tmp_path: Path, qtbot  # type: ignore[no-untyped-def]
) -> None:
    wizard = _shown_wizard(window, qtbot)
    wizard.images_page.folder.setText(str(tmp_path / "xl lora"))  # type: ignore[attr-defined]
    wizard.next()
    base = wizard.model_page.base  # type: ignore[attr-defined]
    base.setText("stabilityai/stable-diffusion-xl-base-1.0")
    base.editingFinished.emit()
    assert wizard.model_page.family_label.text() == "Family: SDXL"  # type: ignore[attr-defined]
    wizard.next()  # the presets shown are SDXL's, not SD1.5's
    presets = wizard.preset_page.list  # type: ignore[attr-defined]
    assert presets.count() and all(presets.item(i).data(Qt.ItemDataRole.UserRole).info.family == "sdxl"
                                   for i in range(presets.count()))
    with qtbot.waitSignal(wizard.accepted, timeout=5000):
        wizard.button(QWizard.WizardButton.FinishButton).click()
    config = window.context.project.load_config()  # type: ignore[union-attr]
    assert (config.model.family, config.model.base) == ("sdxl", "stabilityai/stable-diffusion-xl-base-1.0")


def test_a_project_folder_pasted_with_quotes_is_made_where_it_names(
    window: MainWindow, tmp_path: Path, qtbot  # type: ignore[no-untyped-def]
) -> None:
    wizard = _shown_wizard(window, qtbot)
    # A path copied with the file manager's "Copy as path" comes quoted; not a folder named with its quotes.
    wizard.images_page.folder.setText(f' "{tmp_path / "my cats"}" ')  # type: ignore[attr-defined]
    with qtbot.waitSignal(wizard.accepted, timeout=5000):
        wizard.button(QWizard.WizardButton.FinishButton).click()
    assert window.context.project is not None and window.context.project.root == tmp_path / "my cats"
    assert (tmp_path / "my cats" / "studio.toml").is_file()


def test_a_project_folder_typed_as_a_bare_name_goes_in_the_home_folder_and_says_so(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    monkeypatch.chdir(tmp_path)  # where the studio was started: nobody's idea of where projects go
    wizard = _shown_wizard(window, qtbot)
    wizard.images_page.folder.setText("cat lora")  # type: ignore[attr-defined]
    wizard.images_page.folder.editingFinished.emit()  # type: ignore[attr-defined]
    assert wizard.images_page.layout_label.text().startswith(f"The project goes in {home / 'cat lora'}")  # type: ignore
    with qtbot.waitSignal(wizard.accepted, timeout=5000):
        wizard.button(QWizard.WizardButton.FinishButton).click()
    assert window.context.project is not None and window.context.project.root == home / "cat lora"
    assert not (tmp_path / "cat lora").exists()


def test_an_image_folder_that_cannot_be_listed_is_said_on_the_preset_step_too(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    import studio.core.project.folder as project_folder
    import studio.gui.project.wizard as wizard_module
    from studio.core.dataset.layouts import DatasetError

    photos = tmp_path / "Pictures"
    _pngs(photos, 2)

    def not_permitted(folder: Path) -> object:  # a folder the system keeps from the studio (macOS privacy)
        raise DatasetError(f"Cannot read the image folder {folder}: Operation not permitted. Check that it exists "
                           "and that you may read it.")

    wizard = _shown_wizard(window, qtbot)
    wizard.images_page.folder.setText(str(tmp_path / "lora"))  # type: ignore[attr-defined]
    wizard.images_page.add_image_folder(photos)  # type: ignore[attr-defined]
    monkeypatch.setattr(wizard_module, "detect_layout", not_permitted)
    monkeypatch.setattr(project_folder, "detect_layout", not_permitted)
    wizard.next()
    wizard.next()  # was a traceback, and an empty list of presets with the GPU's subtitle
    page = wizard.preset_page  # type: ignore[attr-defined]
    assert page.subTitle().startswith("No presets can be estimated: Cannot read the image folder")
    assert "Operation not permitted" in page.subTitle() and page.list.count() == 0


def test_the_wizard_refuses_a_project_folder_named_as_a_windows_device(
    window: MainWindow, tmp_path: Path, qtbot  # type: ignore[no-untyped-def]
) -> None:
    """A project typed as "aux" was made here, and on Windows that folder is a device: it neither copies there
    nor can be made there."""
    wizard = _shown_wizard(window, qtbot)
    wizard.images_page.folder.setText(str(tmp_path / "loras" / "Aux"))  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: "'Aux' is AUX, a device name on Windows" in wizard.images_page.layout_label.text())  # type: ignore
    assert "choose another name for the project's folder" in wizard.images_page.layout_label.text()  # type: ignore
    assert not wizard.button(QWizard.WizardButton.NextButton).isEnabled()
    wizard.accept()
    assert window.context.project is None and not (tmp_path / "loras").exists()
