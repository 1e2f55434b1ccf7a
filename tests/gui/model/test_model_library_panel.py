"""The model library on the Model & Preset page: a model on this machine is used, a known one downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.checkpoints import SDXL, write_checkpoint
from fixtures.fake_hub import FakeHub, tiny_sd15_repo
from PySide6.QtWidgets import QInputDialog

from studio.core.models.downloads import DownloadProgress
from studio.core.models.known import find_known
from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings
from tests.gui.conftest import shut_down

SD15 = "stable-diffusion-v1-5/stable-diffusion-v1-5"
SD3 = "stabilityai/stable-diffusion-3-medium-diffusers"


@pytest.fixture
def page(qtbot, tmp_path: Path) -> ModelPage:  # type: ignore[no-untyped-def]
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(tmp_path / "project"))
    widget = ModelPage(context)
    qtbot.addWidget(widget, before_close_func=shut_down)
    widget.library.wait()
    return widget


def test_a_checkpoint_on_this_machine_is_listed_and_used(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    models = tmp_path / "checkpoints"
    models.mkdir()
    checkpoint = write_checkpoint(models / "juggernaut XL.safetensors", SDXL)
    monkeypatch.setenv("STUDIO_MODEL_FOLDERS", str(models))
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(tmp_path / "project"))
    page = ModelPage(context)
    qtbot.addWidget(page)
    page.library.wait()
    library = page.library
    # The project is SD1.5: its models (here the one to download) come first, then the others.
    assert [getattr(m, "path", None) or getattr(m, "id", None) for _k, m in library.rows()][:2] == [checkpoint, SD15]
    assert library.table.item(0, 0).text() == "juggernaut XL.safetensors"
    assert library.table.item(0, 1).text() == "SDXL"
    assert library.table.item(0, 2).text() == "7 MB"  # a small file: its size, not "0.0 GB"
    row = next(i for i, (_k, m) in enumerate(library.rows()) if getattr(m, "path", None) == checkpoint)
    library.table.selectRow(row)
    library.use_selected()
    config = context.project.load_config()  # type: ignore[union-attr]
    assert (config.model.family, config.model.base) == ("sdxl", str(checkpoint))
    assert page.base_status.text().startswith("✓ SDXL base checkpoint")
    page.shutdown()


def test_a_known_model_downloads_in_its_own_process_with_progress(
    page: ModelPage, fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    fake_hub.repos[SD15] = tiny_sd15_repo()
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    assert page.base_status.text().startswith(f"Hub id {SD15}: not on this machine yet")
    known = find_known(SD15)
    assert known is not None
    dialog = page.library.download(known)
    seen: list[DownloadProgress] = []
    dialog.process.sig_progress.connect(seen.append)
    qtbot.waitUntil(lambda: dialog.result_path is not None or dialog.error is not None, timeout=60000)
    assert dialog.error is None and dialog.result_path is not None
    assert seen and seen[-1].done_bytes == seen[-1].total_bytes > 0
    assert "MB/s" in dialog.label.text() or dialog.label.text().startswith("Ready:")
    config = page.context.project.load_config()  # type: ignore[union-attr]
    assert config.model.base == SD15
    assert page.base_status.text() == f"✓ Hub id {SD15}: downloaded, it trains with no network."


@pytest.mark.slow
def test_a_gated_model_asks_for_a_token_and_goes_on(
    page: ModelPage, fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot  # type: ignore[no-untyped-def]
) -> None:
    alt = pytest.importorskip("keyrings.alt.file", reason="the tests keep tokens with keyrings.alt's file backend")
    import keyring

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    monkeypatch.setenv("STUDIO_ALLOW_FILE_KEYRING", "1")
    previous = keyring.get_keyring()
    keyring.set_keyring(alt.PlaintextKeyring())
    try:
        fake_hub.repos[SD3] = {"model_index.json": b"{}", "transformer/config.json": b"{}"}
        fake_hub.gated[SD3] = "hf_token_for_the_test"
        monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
        asked: list[str] = []
        monkeypatch.setattr(QInputDialog, "getText", lambda _p, _t, text, _echo: (asked.append(text) or
                                                                                 ("hf_token_for_the_test", True)))
        known = find_known(SD3)
        assert known is not None
        dialog = page.library.download(known)
        qtbot.waitUntil(lambda: dialog.result_path is not None, timeout=60000)
        assert asked and asked[0].startswith(f"{SD3} is gated")
        assert {r.authorization for r in fake_hub.requests if "/resolve/" in r.path} == {"Bearer hf_token_for_the_test"}
    finally:
        keyring.set_keyring(previous)


def test_a_scan_that_raises_shows_the_error_and_retry_looks_again(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    from studio.core.models import library as model_library
    from studio.gui.widgets.model_library import ModelLibraryPanel

    real_scan = model_library.scan_library

    def broken_scan() -> list[object]:
        raise PermissionError(13, "Permission denied", "/mnt/models")

    monkeypatch.setattr(model_library, "scan_library", broken_scan)
    panel = ModelLibraryPanel("sd15")
    qtbot.addWidget(panel)
    panel.refresh()
    panel.wait()
    assert not panel.scanning  # the waiting state ended with the error
    assert panel.status.text().startswith("Could not look for models: [Errno 13] Permission denied: '/mnt/models'")
    assert panel.rescan_button.text() == "Retry"
    assert panel.rows() and panel.rows()[0][0] == "download"  # the downloadable models stay listed

    monkeypatch.setattr(model_library, "scan_library", real_scan)
    panel.rescan_button.click()
    panel.wait()
    assert not panel.scanning and panel.scan_error is None and panel.rescan_button.text() == "Look again"
    assert "on this machine (searched" in panel.status.text()


def test_the_qwen_image_edit_models_are_named_as_edit_models_not_as_qwen_image(page: ModelPage) -> None:
    shown = {page.library.table.item(row, 0).text(): page.library.table.item(row, 1).text()
             for row in range(page.library.table.rowCount())}
    qwen = {title: family for title, family in shown.items() if title.startswith("Qwen-Image")}
    assert {family for title, family in qwen.items() if "Edit" not in title} == {"Qwen-Image"}, qwen
    edit_rows = {title: family for title, family in qwen.items() if title.startswith("Qwen-Image-Edit")}
    assert len(edit_rows) == 3 and set(edit_rows.values()) == {"Qwen-Image-Edit"}, edit_rows
