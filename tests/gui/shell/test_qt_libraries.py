"""On a minimal Linux the studio names the system libraries Qt's window needs, by file and package,
instead of Qt's abort that blames libxcb-cursor0 whatever is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import PySide6
import pytest

from studio.gui.shell import app, qt_libraries
from studio.gui.shell.qt_libraries import missing_qt_libraries_message, needed_libraries, package_of, uses_xcb

QT_DIR = Path(PySide6.__file__).parent / "Qt"
XCB_PLUGIN = QT_DIR / "plugins" / "platforms" / "libqxcb.so"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not XCB_PLUGIN.is_file(),
                                reason="Qt's xcb plugin exists on Linux only")


def _system_without(*absent: str, lacking: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """A loader as on a system where `absent` are not installed and each key of `lacking` needs its
    value, which is not installed either."""
    def load(name: str) -> None:
        if name in absent:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        if lacking and name in lacking:
            raise OSError(f"{lacking[name]}: cannot open shared object file: No such file or directory")
    return load


def test_the_xcb_plugins_needs_are_read_from_its_file() -> None:
    needed = needed_libraries(XCB_PLUGIN) + needed_libraries(QT_DIR / "lib" / "libQt6XcbQpa.so.6")
    assert {"libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0", "libQt6XcbQpa.so.6"} <= set(needed)
    assert needed_libraries(Path(__file__)) == []  # not an ELF file


def test_missing_libraries_are_named_by_file_and_package() -> None:
    load = _system_without("libxcb-icccm.so.4", "libxcb-keysyms.so.1",
                           lacking={"libxcb-image.so.0": "libxcb-shm.so.0"})
    message = missing_qt_libraries_message({"QT_QPA_PLATFORM": "xcb"}, QT_DIR, load)
    assert message is not None
    assert "not installed: libxcb-icccm.so.4, libxcb-keysyms.so.1, libxcb-shm.so.0." in message
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1 libxcb-shm0" in message
    assert "cursor" not in message
    assert missing_qt_libraries_message({"QT_QPA_PLATFORM": "xcb"}, QT_DIR, _system_without()) is None


def test_only_the_xcb_platform_is_checked() -> None:
    assert uses_xcb({}) and uses_xcb({"QT_QPA_PLATFORM": "xcb"}) and uses_xcb({"QT_QPA_PLATFORM": "xcb;wayland"})
    assert not uses_xcb({"QT_QPA_PLATFORM": "offscreen"}) and not uses_xcb({"QT_QPA_PLATFORM": "wayland;xcb"})
    assert not uses_xcb({"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"})
    assert [package_of(n) for n in ("libxkbcommon-x11.so.0", "libEGL.so.1", "libglib-2.0.so.0")] == [
        "libxkbcommon-x11-0", "libegl1", "libglib2.0-0"]


def test_the_app_says_so_and_never_starts_qt(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setattr(qt_libraries, "load_library", _system_without("libxcb-keysyms.so.1"))
    monkeypatch.setattr(app, "make_application", lambda: pytest.fail("Qt was started"))
    assert app.main([]) == 1
    assert "libxcb-keysyms.so.1" in capsys.readouterr().err


def test_the_readme_lists_the_package_of_every_library_the_plugin_needs() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    base = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1"}  # part of every Linux
    needed = {name for file in (XCB_PLUGIN, QT_DIR / "lib" / "libQt6XcbQpa.so.6") for name in needed_libraries(file)
              if not (QT_DIR / "lib" / name).exists() and name not in base}
    assert needed and all(package_of(name) in readme for name in needed), sorted(needed)
