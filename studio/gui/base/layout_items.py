"""No Python wrapper of a layout item outlives the item.

When a layout that already holds widgets is added to a layout of a shown or parented widget
(`addLayout`, `insertLayout`, QFormLayout's `addRow`/`insertRow` with a layout), PySide makes a Python
wrapper for each of its items (QWidgetItem) and keeps it alive with the outer layout. Qt deletes an
item when its widget is deleted, without telling PySide: the wrapper stays registered under the freed
address, and the next object Qt puts at that address (a menu, a plot's context menu) came back to
Python as a QWidgetItem ("'QWidgetItem' object has no attribute 'addActions'"), or crashed the window.

`install()` makes those calls drop the items' wrappers as soon as the layout is in (the items stay Qt's;
nothing in the studio reads them through Python). It runs when `studio.gui.base` is imported, before any
page builds a layout.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from PySide6.QtWidgets import QBoxLayout, QFormLayout, QGridLayout, QLayout
from shiboken6 import Shiboken

_PATCHED = "_studio_drops_item_wrappers"


def drop_item_wrappers(layout: QLayout) -> None:
    """Unregister the Python wrappers of `layout`'s items and its inner layouts' items (not of the layouts
    themselves, which Qt reports deleted as any QObject)."""
    for index in range(layout.count()):
        item = layout.itemAt(index)
        if item is None:
            continue
        inner = item.layout()
        if inner is not None:
            drop_item_wrappers(inner)
        else:
            Shiboken.invalidate(item)


def _dropping(method: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(method)
    def call(self: QLayout, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        for arg in args:
            if isinstance(arg, QLayout):
                drop_item_wrappers(arg)
        return result

    setattr(call, _PATCHED, True)
    return call


def install() -> None:
    """Patch the calls that add a filled layout to another (once; a second call changes nothing)."""
    for owner, names in ((QBoxLayout, ("addLayout", "insertLayout")), (QGridLayout, ("addLayout",)),
                         (QFormLayout, ("addRow", "insertRow", "setLayout"))):
        for name in names:
            method = getattr(owner, name)
            if not getattr(method, _PATCHED, False):
                setattr(owner, name, _dropping(method))
