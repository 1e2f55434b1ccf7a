"""A download's stdout read as protocol messages through the runner's process wrapper."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fixtures.fake_child import fake_python

from studio.core.models.downloads import DownloadProgress
from studio.gui.widgets.downloads import DownloadProcess

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stand-in child is a shell script")


def test_a_malformed_download_line_is_skipped_and_counted_and_the_download_goes_on(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = [
        json.dumps({"type": "progress", "repo_id": "a/b", "done_bytes": "lots"}),  # used to be setattr'd as it was
        json.dumps({"type": "progress"}),  # used to raise KeyError in a slot
        json.dumps({"type": "progress", "repo_id": "a/b", "done_bytes": 5, "total_bytes": 10, "rate_bps": 2.5}),
        json.dumps({"type": "done", "path": str(tmp_path / "snapshot"), "model": "a/b"}),
    ]
    download = DownloadProcess(str(fake_python(tmp_path / "bin", lines)))
    seen: list[DownloadProgress] = []
    download.sig_progress.connect(seen.append)
    with qtbot.waitSignal(download.sig_done, timeout=20000) as done:
        download.start("a/b")
    assert done.args == [str(tmp_path / "snapshot")]
    assert [(p.done_bytes, p.total_bytes) for p in seen] == [(5, 10)]
    qtbot.waitUntil(lambda: not download.running, timeout=10000)
    assert download.process.malformed_lines == 2


def test_a_download_that_ends_without_a_word_says_its_exit_code_and_last_words(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    download = DownloadProcess(str(fake_python(tmp_path / "bin", [], exit_code=2, stderr="ConnectionError: gone\n")))
    with qtbot.waitSignal(download.sig_failed, timeout=20000) as failed:
        download.start("a/b")
    assert failed.args == ["The download ended (exit code 2): ConnectionError: gone", False]


def test_a_download_that_failed_offline_is_retried_from_the_dialog(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from studio.gui.widgets.downloads import DownloadDialog

    offline = fake_python(tmp_path / "offline", [], exit_code=2, stderr="ConnectionError: no network\n")
    dialog = DownloadDialog("a/b", python=str(offline))
    qtbot.addWidget(dialog)
    dialog.show()
    with qtbot.waitSignal(dialog.process.sig_failed, timeout=20000):
        dialog.start()
    assert "ConnectionError: no network" in dialog.label.text() and "Press Retry" in dialog.label.text()
    assert dialog.retry_button.isVisible() and dialog.cancel_button.text() == "Close"

    # The network is back: Retry downloads it.
    snapshot = tmp_path / "snapshot"
    dialog.process.python = str(fake_python(tmp_path / "online", [
        json.dumps({"type": "done", "path": str(snapshot), "model": "a/b"})]))
    with qtbot.waitSignal(dialog.sig_done, timeout=20000) as done:
        dialog.retry_button.click()
    assert done.args == ["a/b", str(snapshot)] and dialog.result_path == str(snapshot)


def test_a_refused_token_asks_for_a_new_one_in_those_words(qtbot, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QInputDialog

    from studio.gui.widgets.downloads import DownloadDialog

    asked: list[str] = []
    monkeypatch.setattr(QInputDialog, "getText", lambda _p, _t, text, _echo: (asked.append(text) or ("", False)))
    dialog = DownloadDialog("a/b", python=str(tmp_path / "python"))
    qtbot.addWidget(dialog)
    dialog._failed("The Hugging Face hub refused the token kept in the system keyring for a/b (401: invalid "
                   "credentials): it has expired or was revoked.", True)
    assert asked == ["The Hugging Face hub refused the token kept for downloads (it has expired or was revoked): "
                     "paste a new one (huggingface.co/settings/tokens). It is kept in the system keyring."]
    asked.clear()
    dialog._failed("a/b is gated (it needs a Hugging Face token): accept its licence", True)
    assert asked[0].startswith("a/b is gated: accept its licence on huggingface.co")
