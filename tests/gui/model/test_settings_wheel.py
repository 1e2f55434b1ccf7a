"""The mouse wheel over the settings form scrolls it; a field changes by wheel only once clicked into."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QComboBox, QScrollArea, QSpinBox, QWidget

from studio.core.config.files.toml_file import load_config
from studio.core.project.folder import create_project
from studio.gui.base.wheel_guard import install_wheel_guard
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings


def _wheel(widget: QWidget, notches: int = -3) -> None:
    """A real wheel event over the middle of `widget` (negative: scrolling down)."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0),
                        QPoint(0, 120 * notches), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def _scroll_area(widget: QWidget) -> QScrollArea:
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QScrollArea):
        parent = parent.parentWidget()
    assert parent is not None
    return parent


def test_wheel_over_unfocused_fields_scrolls_the_form_and_changes_nothing(qtbot, tmp_path: Path) -> None:
    install_wheel_guard(QApplication.instance())  # type: ignore[arg-type]
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(create_project(tmp_path / "project"))
    page = ModelPage(context)
    qtbot.addWidget(page)
    page.resize(1280, 720)
    page.show()
    page.form.show_advanced.setChecked(True)  # a long form, as a person scrolls it
    qtbot.waitExposed(page)
    before_file = context.project.config_path.read_text()  # type: ignore[union-attr]

    prediction = page.form.findChild(QComboBox, "field_model_prediction_type")
    rank = page.form.findChild(QSpinBox, "field_method_rank")
    assert prediction.focusPolicy() == Qt.FocusPolicy.StrongFocus  # the wheel does not focus it
    area = _scroll_area(page.form)
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0
    start = bar.value()
    for field in (prediction, rank):
        assert not field.hasFocus()
        _wheel(field)
    assert prediction.currentData() == "auto"
    assert rank.value() == 16
    assert bar.value() > start  # the form scrolled instead
    assert context.project.config_path.read_text() == before_file  # type: ignore[union-attr]

    # Clicked into, the field takes the wheel as before.
    rank.setFocus()
    qtbot.waitUntil(rank.hasFocus, timeout=2000)
    _wheel(rank, 1)
    assert rank.value() == 17
    rank.clearFocus()  # editing finished: the value is saved
    qtbot.waitUntil(lambda: load_config(context.project.config_path).method.rank == 17,  # type: ignore[union-attr]
                    timeout=2000)
