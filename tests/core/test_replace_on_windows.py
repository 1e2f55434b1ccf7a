"""On Windows a file another program has open cannot be replaced: the antivirus scan or the search
indexer opens a file just written for a moment. A save then tries again for a while instead of failing
at once; elsewhere the error comes at once, and a file that stays open is reported, with nothing lost."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from studio.core import files
from studio.core.dataset.captions.caption_files import write_texts_atomically


class _Windows:
    platform = "win32"

    def __getattr__(self, attribute: str) -> Any:
        return getattr(sys, attribute)


def _open_elsewhere_for(tries: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """os.replace refuses the first `tries` times, as Windows does while another program holds the target."""
    refused: list[str] = []
    real = os.replace

    def replace(source: Any, target: Any) -> None:
        if len(refused) < tries:
            refused.append(str(target))
            raise PermissionError(13, "The process cannot access the file because it is being used by another "
                                      "process", str(target))
        real(source, target)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(files.time, "sleep", lambda seconds: None)
    return refused


def test_on_windows_a_save_waits_for_the_program_that_has_the_file_open(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "sys", _Windows())
    settings, caption = tmp_path / "settings.toml", tmp_path / "cat.txt"
    settings.write_text("old")
    caption.write_text("a cat")
    refused = _open_elsewhere_for(3, monkeypatch)
    files.atomic_write_text(settings, "new")
    assert settings.read_text() == "new" and len(refused) == 3
    refused.clear()
    assert write_texts_atomically({caption: "a black cat"}) == {}
    assert caption.read_text(encoding="utf-8") == "a black cat" and len(refused) == 3
    assert not list(tmp_path.glob("*.tmp"))  # no temporary file left


def test_a_file_that_stays_open_is_reported_and_nothing_is_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "sys", _Windows())
    now = [0.0]
    monkeypatch.setattr(files.time, "monotonic", lambda: now[0])
    settings = tmp_path / "settings.toml"
    settings.write_text("old")
    refused = _open_elsewhere_for(10**6, monkeypatch)
    monkeypatch.setattr(files.time, "sleep", lambda seconds: now.__setitem__(0, now[0] + seconds))
    with pytest.raises(PermissionError, match="being used by another process"):
        files.atomic_write_text(settings, "new")
    assert settings.read_text() == "old" and not list(tmp_path.glob("*.tmp"))
    assert 5 < len(refused) < 100 and now[0] >= files.REPLACE_PATIENCE_S


def test_elsewhere_a_refused_replace_fails_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = tmp_path / "settings.toml"
    refused = _open_elsewhere_for(1, monkeypatch)
    with pytest.raises(PermissionError):
        files.atomic_write_text(settings, "new")
    assert len(refused) == 1 and not settings.exists()


def test_on_windows_a_new_caption_waits_for_the_antivirus_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image's first caption is made by a rename that never replaces (another program may have made the
    file meanwhile); the antivirus holding the file just written refused it as it refuses a replace."""
    from studio.core.dataset.captions import caption_guard

    monkeypatch.setattr(files, "sys", _Windows())
    monkeypatch.setattr(caption_guard, "sys", _Windows())
    monkeypatch.setattr(files.time, "sleep", lambda seconds: None)
    refused: list[str] = []
    real = os.rename

    def rename(source: Any, target: Any) -> None:
        if len(refused) < 3:
            refused.append(str(target))
            raise PermissionError(13, "The process cannot access the file because it is being used by another "
                                      "process", str(source))
        if os.path.exists(target):
            raise FileExistsError(17, "Cannot create a file when that file already exists", str(target))
        real(source, target)

    monkeypatch.setattr(os, "rename", rename)
    caption = tmp_path / "cat.txt"
    assert write_texts_atomically({caption: "a black cat"}, unchanged={caption: None}) == {}
    assert caption.read_text(encoding="utf-8") == "a black cat" and len(refused) == 3
    assert not list(tmp_path.glob("*.tmp"))
    # One another program made meanwhile stays as it made it.
    dog = tmp_path / "dog.txt"
    dog.write_text("theirs")
    failed = write_texts_atomically({dog: "ours"}, unchanged={dog: None})
    assert isinstance(failed[dog], caption_guard.FileChanged) and dog.read_text() == "theirs"
