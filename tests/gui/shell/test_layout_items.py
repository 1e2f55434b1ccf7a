"""No Python wrapper of a layout item outlives its item (studio/gui/base/layout_items.py).

A wrapper PySide keeps for a QWidgetItem stays registered under the item's address after Qt deletes the
item with its widget; a menu Qt later made at that address came back to Python as that QWidgetItem
("'QWidgetItem' object has no attribute 'addActions'" when the main window built its File menu)."""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QEvent
from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QLabel, QVBoxLayout, QWidget, QWidgetItem
from shiboken6 import Shiboken

from studio.gui.model.page import ModelPage


def _registered_item_wrappers() -> list[QWidgetItem]:
    """The QWidgetItem wrappers PySide would hand out again for their addresses."""
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, QWidgetItem) and Shiboken.isValid(o)]


def test_a_filled_row_added_to_a_page_leaves_no_item_wrapper_behind_its_deleted_widgets(qtbot) -> None:
    page = QWidget()
    qtbot.addWidget(page)
    outer = QVBoxLayout(page)
    labels = []
    for number in range(5):
        row, inner = QHBoxLayout(), QHBoxLayout()
        inner.addWidget(QLabel("inner"))
        row.addWidget(label := QLabel(str(number)))
        row.addLayout(inner)
        outer.addLayout(row)  # a row filled first, then added: what every page does
        labels.append(label)
    form, field = QFormLayout(), QHBoxLayout()
    field.addWidget(QLabel("field"))
    outer.addLayout(form)
    form.addRow("a field", field)
    for label in labels:
        label.deleteLater()  # Qt deletes each label's QWidgetItem with it
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert _registered_item_wrappers() == []
    page.show()  # the layouts still lay the page out
    assert outer.count() == 6 and form.rowCount() == 1


def test_a_built_page_keeps_no_item_wrappers(qtbot, tmp_path) -> None:
    from studio.gui.context import StudioContext
    from studio.gui.shell.application import make_settings

    page = ModelPage(StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb"))
    qtbot.addWidget(page)
    assert _registered_item_wrappers() == []
    page.shutdown()
