"""A config whose paths cannot be made absolute is never estimated as written: the Model page's estimate
area says which field, which value and what to do, and the status line says it too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.waits import scaled_ms
from PySide6.QtWidgets import QLabel

from studio.core.project.folder import create_project
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")


def test_a_project_folder_whose_name_is_not_utf8_shows_why_there_is_no_estimate(qtbot, tmp_path: Path) -> None:
    folder = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9")))
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    statuses: list[str] = []
    context.sig_status.connect(statuses.append)
    context.set_project(create_project(folder))
    page = ModelPage(context)
    qtbot.addWidget(page)
    verdict = page.findChild(QLabel, "estimate_verdict")
    qtbot.waitUntil(lambda: page.hardware.report is not None, timeout=scaled_ms(10000))
    qtbot.waitUntil(lambda: "No estimate" in verdict.text(), timeout=scaled_ms(5000))
    text = verdict.text()
    assert text.startswith("⚠ No estimate: a path of the settings cannot be used.")
    assert 'dataset.concepts[0].path = "images": resolves to' in text and "caf\\xe9" in text
    assert "rename the folder" in text
    # Nothing of an estimate of the unresolved config is shown beside it.
    assert page.estimate.estimate is None and page.findChild(QLabel, "estimate_total").text() == ""
    assert not page.gpu_plan.isVisible()
    assert any(s.startswith("No VRAM estimate: dataset.concepts[0].path") for s in statuses)
