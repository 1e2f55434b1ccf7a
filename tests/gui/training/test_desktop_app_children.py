"""A process the desktop app starts (the trainer, a download, captioning) is told it speaks for the app, so the
hints it writes name the window's actions (core/app_words.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from studio.core.app_words import DESKTOP_APP_ENV
from studio.gui.runner.process import CommandProcess


def test_the_desktop_apps_processes_are_told_they_speak_for_it(qtbot, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DESKTOP_APP_ENV, raising=False)
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # the window is the desktop app
    process = CommandProcess()
    console = tmp_path / "console.log"
    script = "import os; print('app:', os.environ.get('STUDIO_DESKTOP_APP'))"
    with qtbot.waitSignal(process.sig_finished, timeout=60_000):
        assert process.start([sys.executable, "-c", script], console)
    assert "app: 1" in console.read_text(encoding="utf-8")
