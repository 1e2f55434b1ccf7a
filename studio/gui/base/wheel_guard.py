"""The mouse wheel scrolls the page: a setting changes by wheel only once a person clicked into it.

Without this, scrolling a long form over a combo box or a spin box changes the value under
the pointer (and the project saves it at once). One filter on the application covers every
field of every page and dialog.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox, QScrollBar, QWidget

GUARD_NAME = "wheel_guard"


def is_guarded(widget: QObject) -> bool:
    """Fields whose value the wheel changes: spin boxes, combo boxes, sliders (not scroll bars)."""
    if isinstance(widget, QScrollBar):
        return False
    return isinstance(widget, QAbstractSpinBox | QComboBox | QAbstractSlider)


class WheelGuard(QObject):
    """An application event filter: unfocused fields pass the wheel on to what holds them."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.Polish and is_guarded(watched):
            # The wheel would otherwise give the field focus before it reaches this filter.
            widget = watched if isinstance(watched, QWidget) else None
            if widget is not None and widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        elif kind == QEvent.Type.Wheel and is_guarded(watched):
            widget = watched if isinstance(watched, QWidget) else None
            if widget is not None and not widget.hasFocus() and isinstance(event, QWheelEvent):
                pass_to_parents(widget, event)
                return True
        return False


def pass_to_parents(widget: QWidget, event: QWheelEvent) -> None:
    """Offer the wheel to `widget`'s parents, nearest first, until one takes it (a scroll area does).

    Done here rather than left to Qt: Qt passes a wheel on only for events from the system,
    and a field inside a page must behave the same for both.
    """
    position = event.position()
    event.accept()  # the field is done with it either way
    while not widget.isWindow():
        parent = widget.parentWidget()
        if parent is None:
            return
        position = widget.mapToParent(position)
        widget = parent
        copy = QWheelEvent(position, event.globalPosition(), event.pixelDelta(), event.angleDelta(),
                           event.buttons(), event.modifiers(), event.phase(), event.inverted(), event.source())
        copy.ignore()
        QApplication.sendEvent(widget, copy)
        if copy.isAccepted():
            return


def install_wheel_guard(app: QApplication) -> WheelGuard:
    """Install the guard once on `app` (a second call returns the first guard)."""
    existing = app.findChild(WheelGuard, GUARD_NAME)
    if existing is not None:
        return existing
    guard = WheelGuard(app)
    guard.setObjectName(GUARD_NAME)
    app.installEventFilter(guard)
    return guard
