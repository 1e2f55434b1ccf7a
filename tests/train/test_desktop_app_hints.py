"""The trainer started by the desktop app (STUDIO_DESKTOP_APP=1 from its process wrapper) gives hints in the
window's words: the app ships no `studio-train`."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.app_words import DESKTOP_APP_ENV
from studio.train.errors import disk_full_error, file_too_large_error


@pytest.mark.parametrize(("started_by_app", "says"), [(True, "Resume on the Train or Runs page"),
                                                      (False, "`studio-train resume RUN_DIR` (the Resume button)")])
def test_a_full_disk_says_how_to_go_on_where_it_is_read(started_by_app: bool, says: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if started_by_app:
        monkeypatch.setenv(DESKTOP_APP_ENV, "1")
    else:
        monkeypatch.delenv(DESKTOP_APP_ENV, raising=False)
    for error in (disk_full_error(tmp_path, 10**9, "a checkpoint"), file_too_large_error(tmp_path, "a checkpoint")):
        assert says in error.hint
        assert ("studio-train" in error.hint) is not started_by_app
