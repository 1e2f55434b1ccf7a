"""The .pth file that links the training environment to the studio's code is read right whatever the
locale: an app unpacked under a Windows user folder with accents (C:\\Users\\José\\…) still trains."""

from __future__ import annotations

import io
import site
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from studio.core.files import atomic_write_text
from studio.core.trainenv.installer import pth_text


def read_as_windows_does(site_dir: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What Python 3.11's site adds to sys.path from the .pth file on a Western-European Windows (cp1252)."""

    def text_wrapper(buffer: Any, encoding: str | None = None, **kwargs: Any) -> io.TextIOWrapper:
        return io.TextIOWrapper(buffer, encoding="cp1252" if encoding == "locale" else encoding, **kwargs)

    monkeypatch.setattr(site, "io", SimpleNamespace(TextIOWrapper=text_wrapper, open_code=io.open_code))
    before = list(sys.path)
    monkeypatch.setattr(sys, "path", before.copy())
    site.addpackage(str(site_dir), name, set())
    return sys.path[len(before):]


@pytest.mark.parametrize("folder", ["Studio", "José", "студия"])
def test_the_studio_folder_reaches_the_path_under_a_windows_code_page(
        tmp_path: Path, folder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / folder / "_internal"
    source.mkdir(parents=True)
    atomic_write_text(tmp_path / "studio-source.pth", pth_text(source))
    assert read_as_windows_does(tmp_path, "studio-source.pth", monkeypatch) == [str(source)]
