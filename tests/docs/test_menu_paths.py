"""Every menu path the docs tell a person to choose (**File → Open Project…**) is one the window has."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtWidgets import QMenu

from studio.gui.context import StudioContext
from studio.gui.shell.application import make_settings
from studio.gui.shell.main_window import MainWindow

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A bold path starting at one of the window's menus, "→" or ">" between its parts, over a line break too.
MENU_PATH = re.compile(r"\*\*((?:File|Go|Tools|Help)\s*(?:→|>)[^*]+)\*\*")


def _plain(text: str) -> str:
    """A menu text as a person reads it: no shortcut mark, no trailing ellipsis."""
    return text.replace("&", "").removesuffix("…").strip()


def _paths(menu: QMenu, prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
    found = set()
    for action in menu.actions():
        if action.isSeparator():
            continue
        path = (*prefix, _plain(action.text()))
        found.add(path)
        if action.menu() is not None:
            found |= _paths(action.menu(), path)
    return found


def test_every_menu_path_in_the_docs_is_in_the_window(qtbot, tmp_path: Path) -> None:
    window = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(window)
    menus = set()
    for action in window.menuBar().actions():
        top = (_plain(action.text()),)
        menus |= {top} | _paths(action.menu(), top)
    given = {(page.name, tuple(_plain(" ".join(part.split())) for part in re.split(r"→|>", path)))
             for page in PAGES for path in MENU_PATH.findall(page.read_text(encoding="utf-8"))}
    assert given  # the docs do name menu paths
    assert sorted((page, " → ".join(path)) for page, path in given if path not in menus) == []
