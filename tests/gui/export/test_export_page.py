"""The Export page: the cost table a person compares, and a bundle written off the GUI thread."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from studio.core.export.gpu_catalogue import load_catalogue
from studio.core.project.folder import Project
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext
from studio.gui.export.cost_table import CHEAPEST
from studio.gui.export.page import ExportPage
from studio.gui.shell.application import make_settings
from tests.gui.conftest import shut_down


@pytest.fixture
def page(qtbot, tmp_path: Path, demo: Project) -> ExportPage:
    context = StudioContext(make_settings(tmp_path / "settings.ini"))
    widget = ExportPage(context)
    qtbot.addWidget(widget, before_close_func=shut_down)
    context.set_project(demo)
    return widget


def test_the_cost_table_lists_every_gpu_type_and_count(page: ExportPage) -> None:
    gpus = len(load_catalogue().gpus)
    assert page.table.rowCount() == gpus * 4
    first = page.table.row_text(0)
    assert first["GPUs"] == "1x H200 141GB" and first["Fits"] == "yes"
    assert first["Cost"].endswith("USD")
    cheapest = [n for n in range(page.table.rowCount()) if "cheapest" in page.table.row_text(n)["Best"]]
    assert len(cheapest) == 1
    assert page.table.item(cheapest[0], 0).background().color() == CHEAPEST
    assert any("fastest" in page.table.row_text(n)["Best"] for n in range(page.table.rowCount()))
    assert "InfiniBand" in page.assumptions.text() and "noted" in page.assumptions.text()


def test_nodes_and_a_chosen_row_change_the_options(page: ExportPage) -> None:
    page.nodes_spin.setValue(2)
    assert page.table.row_text(1)["GPUs"] == "2 nodes x 2 H200 141GB"
    row = next(n for n in range(page.table.rowCount()) if page.table.row_text(n)["GPUs"] == "2 nodes x 4 H100 80GB")
    page.table.cellDoubleClicked.emit(row, 0)
    assert page.gpu_combo.currentData() == "h100" and page.gpus_spin.value() == 4
    assert "2x4h100" in page.out_edit.text()


def test_a_local_model_is_explained_and_the_export_says_what_to_do(qtbot, page: ExportPage) -> None:
    assert "local folder" in page.base_label.text()
    assert page.include_model.isEnabled() and page.include_model.isChecked()  # a bundle that runs as it is
    page.include_model.click()  # unticked, and no remote path named
    page.export_button.click()
    qtbot.waitUntil(lambda: page.export_button.isEnabled(), timeout=20_000)
    text = page.result.toPlainText()
    assert text.startswith("The bundle was not written")
    # The fix is worded with the page's own controls, not the command line's flags.
    assert "“Copy the local base model into the bundle” ticked" in text and "“Remote base model” field" in text
    assert "--include-model" not in text and "--remote-base" not in text


def test_export_writes_the_bundle_and_shows_the_remote_command(qtbot, page: ExportPage, tmp_path: Path) -> None:
    out = tmp_path / "my bundle"
    page.out_edit.setText(str(out))
    page.out_edit.setModified(True)
    page.gpus_spin.setValue(2)
    page.include_model.setChecked(True)
    page.dataset_combo.setCurrentIndex(1)
    page.zip_check.setChecked(True)
    qtbot.mouseClick(page.export_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.report is not None, timeout=30_000)
    text = page.result.toPlainText()
    assert f"Bundle written to {tmp_path / 'my bundle.zip'}" in text
    assert "./launch.sh --check" in text and "max_steps 60 -> 30" in text
    assert (out / "launch.sh").is_file() and (out / "model" / "tiny-sd15").is_dir()
    assert [p.name for p in (out / "dataset").iterdir()] == ["manifest.json"]
    assert page.open_button.isEnabled() and not page.progress.isVisible()


def test_the_base_model_box_is_ticked_until_unticked_and_stays_so_after_a_restart(
        qtbot, tmp_path: Path, demo: Project) -> None:
    def open_page() -> ExportPage:
        context = StudioContext(make_settings(tmp_path / "settings.ini"))
        widget = ExportPage(context)
        qtbot.addWidget(widget, before_close_func=shut_down)
        context.set_project(demo)
        return widget

    first = open_page()
    assert first.include_model.isChecked()
    first.include_model.click()
    first.context.settings.sync()
    assert not open_page().include_model.isChecked()  # the studio started again: as the person left it


def test_self_test_reports_the_rows(page: ExportPage) -> None:
    assert page.self_test(SelfTestOptions()) == {"export_rows": page.table.rowCount()}


def test_without_a_project_the_page_waits(qtbot, tmp_path: Path) -> None:
    context = StudioContext(make_settings(tmp_path / "settings.ini"))
    widget = ExportPage(context)
    qtbot.addWidget(widget)
    assert widget.table.rowCount() == 0 and not widget.export_button.isEnabled()
    assert widget.self_test(SelfTestOptions()) == {"export_rows": 0}


def test_a_bundle_folder_typed_relative_goes_into_the_project(qtbot, page: ExportPage, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """As every path of a project: "bundles/mine" is the project's, not the folder the studio was started from."""
    started_in = tmp_path / "started-in"
    started_in.mkdir()
    monkeypatch.chdir(started_in)
    page.out_edit.setText("bundles/mine")
    page.out_edit.setModified(True)
    page.include_model.setChecked(True)
    qtbot.mouseClick(page.export_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.report is not None or page.result.toPlainText().startswith("The bundle was not"),
                    timeout=30_000)
    root = page.context.project.root  # type: ignore[union-attr]
    assert (root / "bundles" / "mine" / "launch.sh").is_file()
    assert not (started_in / "bundles").exists()


def test_the_bundles_parent_folder_dialog_opens_where_the_bundle_goes(page: ExportPage,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QFileDialog

    opened: list[str] = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda _p, _t, start="", *_a: opened.append(start) or "")
    root = page.context.project.root  # type: ignore[union-attr]
    assert Path(page.out_edit.text()).parent == root / "exports"  # the default, not made yet
    page._choose_folder()  # type: ignore[attr-defined]
    (root / "exports").mkdir()
    page._choose_folder()  # type: ignore[attr-defined]
    assert opened == [str(root), str(root / "exports")]


def test_the_bundle_folder_chosen_for_one_project_is_not_another_ones(page: ExportPage, tmp_path: Path) -> None:
    from studio.core.project.folder import create_project

    first = page.context.project.root  # type: ignore[union-attr]
    page.out_edit.setText(str(first / "exports" / "for-the-pod"))
    page.out_edit.setModified(True)  # typed by the person
    other = create_project(tmp_path / "other project")
    page.context.set_project(other)
    assert Path(page.out_edit.text()).parent == other.root / "exports"


class _HeldCopy:
    """The export's first dataset file is read, then held until `go` is set (the minutes of a big dataset)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import threading

        import studio.core.export.dataset_selection as selection

        self.reached, self.go = threading.Event(), threading.Event()
        real = selection.sha256_file

        def held(path: Path) -> str:
            self.reached.set()
            self.go.wait(60)  # a failed test lets it go on in the end
            return real(path)

        monkeypatch.setattr(selection, "sha256_file", held)


def test_cancel_export_stops_the_copy_and_leaves_no_half_bundle(qtbot, page: ExportPage, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    held = _HeldCopy(monkeypatch)
    out = tmp_path / "big bundle"
    page.out_edit.setText(str(out))
    page.out_edit.setModified(True)
    page.export_button.click()
    assert not page.cancel_button.isHidden()
    qtbot.waitUntil(held.reached.is_set, timeout=30_000)
    page.context.set_config(page.context.config, save=False)  # a setting changed on another page meanwhile
    assert not page.export_button.isEnabled()  # no second export queued behind this one
    page.cancel_button.click()
    held.go.set()
    qtbot.waitUntil(lambda: page.export_button.isEnabled(), timeout=30_000)
    assert page.result.toPlainText() == f"The bundle was not written:\nthe export was cancelled; nothing of it is " \
                                        f"left in {out}"
    assert not out.exists() and page.report is None


def test_closing_the_window_during_an_export_stops_it_and_removes_the_half_bundle(
        qtbot, page: ExportPage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = _HeldCopy(monkeypatch)
    out = tmp_path / "big bundle"
    page.out_edit.setText(str(out))
    page.out_edit.setModified(True)
    page.export_button.click()
    qtbot.waitUntil(held.reached.is_set, timeout=30_000)
    real_wait = page.worker.wait

    def wait(timeout_s: float = 30.0) -> bool:  # the copy goes on while the closing window waits for it
        held.go.set()
        return real_wait(timeout_s)

    monkeypatch.setattr(page.worker, "wait", wait)
    asked: list[bool] = []
    page.confirm_close = lambda: asked.append(False) or False  # Cancel: the window stays, the export goes on
    assert not page.can_close() and asked
    page.confirm_close = lambda: True
    assert page.can_close()
    page.shutdown()
    assert not out.exists()  # it went on copying unseen after the window closed, and kept the bundle


def test_a_second_export_in_the_same_minute_gets_a_folder_of_its_own(qtbot, page: ExportPage,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Exported, then again with "Also write a .zip" ticked: the second was refused as "exists and is not empty".
    import datetime
    import types

    import studio.gui.export.page as page_module

    now = datetime.datetime(2026, 12, 7, 15, 30, 5)
    monkeypatch.setattr(page_module, "_dt", types.SimpleNamespace(datetime=types.SimpleNamespace(now=lambda: now)))
    page.gpus_spin.setValue(2)
    first = Path(page.out_edit.text())
    assert first.name.endswith("-2xh200-20261207-1530")
    first.mkdir(parents=True)
    (first / "launch.sh").write_text("#!/bin/sh\n", encoding="utf-8")  # the first export's bundle
    page.gpus_spin.setValue(1)
    page.gpus_spin.setValue(2)  # the default folder worked out again, as after an export
    assert page.out_edit.text() == f"{first}-2"
