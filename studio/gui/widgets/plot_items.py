"""What keeps the live plots cheap to paint: a one-path grid and a view that follows the data.

Measured on the studio's plots (offscreen, 600x350): pyqtgraph's axis grid costs 5-25 ms
per paint against under 1 ms without it, and its auto-range moves the view during the
paint, which paints every plot twice per update. `TickGrid` draws the same grid lines as
one path; `FollowRange` sets the view when the data is set, and only when the data
leaves it, so a new point usually repaints the curve alone. `answer_labels_without_state`
keeps a plot's titles and legend lines from raising while Python's collector takes them apart.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSizeF, Qt
from PySide6.QtGui import QPainter, QPicture

GRID_PEN = (255, 255, 255, 38)


def answer_labels_without_state() -> None:
    """A plot title or legend line whose Python attributes are gone answers Qt's size question with the size
    it has, so the layout leaves it as it is.

    Python's cycle collector empties the objects of a dropped cycle (a window's plots) one by one, in an
    order of its own, and Qt deletes the widgets as their last references go; a layout that is torn down
    then asks the labels still standing for their size. pyqtgraph's `LabelItem.sizeHint` reads its own
    `_sizeHint` and raised AttributeError in Qt's event loop, once per label (eight, the titles and legend
    lines of a run's plots, failed a remote-run test). Any other answer than the size it has would make the
    layout resize the label, and its resizeEvent reads attributes that are gone too.
    """
    original = pg.LabelItem.sizeHint
    if getattr(original, "_studio_answers_without_state", False):
        return

    def size_hint(self: pg.LabelItem, hint: Qt.SizeHint, constraint: QSizeF) -> QSizeF:
        if "_sizeHint" not in vars(self):  # taken apart (or not yet built): stay as it is
            return self.size()
        return original(self, hint, constraint)

    size_hint._studio_answers_without_state = True  # type: ignore[attr-defined]
    pg.LabelItem.sizeHint = size_hint


answer_labels_without_state()  # before the first plot is made: every plot of the studio imports this module


class TickGrid(pg.PlotCurveItem):
    """Grid lines at the axes' major ticks, as one path behind the curves."""

    def __init__(self, plot: pg.PlotItem) -> None:
        super().__init__(pen=pg.mkPen(GRID_PEN, width=1), connect="pairs")
        self.setZValue(-1000)
        self._plot = plot
        # On the view box, not the plot item: the plot item would list it with the curves.
        plot.getViewBox().addItem(self, ignoreBounds=True)  # the grid never widens the view
        view = plot.getViewBox()
        view.sigRangeChanged.connect(self._update)
        view.sigResized.connect(self._update)

    def _ticks(self, axis_name: str, low: float, high: float, pixels: float) -> list[float]:
        if not (math.isfinite(low) and math.isfinite(high)) or high <= low or pixels <= 0:
            return []
        levels = self._plot.getAxis(axis_name).tickValues(low, high, pixels)
        return [v for v in levels[0][1] if low <= v <= high] if levels else []

    def _update(self, *_args: object) -> None:
        view = self._plot.getViewBox()
        (x0, x1), (y0, y1) = view.viewRange()
        size = view.size()
        xs = self._ticks("bottom", x0, x1, size.width())
        ys = self._ticks("left", y0, y1, size.height())
        # Each line is a pair of points; connect="pairs" draws them as separate segments.
        x = np.concatenate([np.repeat(xs, 2), np.tile([x0, x1], len(ys))]) if xs or ys else np.empty(0)
        y = np.concatenate([np.tile([y0, y1], len(xs)), np.repeat(ys, 2)]) if xs or ys else np.empty(0)
        self.setData(x.astype(np.float64), y.astype(np.float64), connect="pairs")


def settle_axes(plot: pg.PlotItem) -> None:
    """Lay out the plot's axes for its new range now, before the plot is painted.

    An axis measures its tick labels while it paints; when they need more (or less) room
    it resizes, the plot lays itself out again and the whole plot is painted a second time
    in the next pass (a plot of 100,000 points: twice 5-7 ms). Drawing the axes' labels
    here, as their paint would (pyqtgraph keeps the picture), lets the new width reach the
    layout before the first paint, so the plot is painted once.
    """
    for name in ("left", "bottom", "right"):
        _draw_axis(plot.getAxis(name))
    plot.layout.activate()  # the axes' new sizes, now rather than after the next paint


def _draw_axis(axis: pg.AxisItem) -> None:
    if axis.isVisible() and axis.picture is None:
        picture = QPicture()
        painter = QPainter(picture)
        try:
            if axis.style["tickFont"]:
                painter.setFont(axis.style["tickFont"])
            specs = axis.generateDrawSpecs(painter)  # resizes the axis if its labels need it
            if specs is not None:
                axis.drawPicture(painter, *specs)
        finally:
            painter.end()
        axis.picture = picture


def _nice_ceiling(value: float) -> float:
    """The next of 1, 2, 2.5, 5 x 10^k at or above `value` (round axis ends)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


class FollowRange:
    """Keeps a live plot's view on its data until the person pans or zooms it.

    Feed it the growing arrays of every curve; `apply` then moves the view only when a
    point falls outside it, with room to spare so the next points fit too. Pressing
    pyqtgraph's "A" button (auto-range) or panning hands the view back to the person.
    """

    def __init__(self, plot: pg.PlotItem) -> None:
        self._plot = plot
        self._view = plot.getViewBox()
        self._view.sigRangeChangedManually.connect(self._manual)
        self.reset()

    def reset(self) -> None:
        self.following = True
        self._view.disableAutoRange()
        self._seen: dict[object, int] = {}
        self._bounds = [math.inf, -math.inf, math.inf, -math.inf]  # x min, x max, y min, y max
        self._range: tuple[float, float, float, float] | None = None

    def _manual(self, *_args: object) -> None:
        self.following = False

    def forget_seen(self) -> None:
        """The curves lost points (a resumed run dropped the steps after its checkpoint): the next feed
        takes every point again, those that came in the lost ones' place too."""
        self._seen = {}

    def feed(self, key: object, x: np.ndarray, y: np.ndarray) -> None:
        """Take the points of curve `key` not seen yet (arrays only grow within a run)."""
        start = self._seen.get(key, 0)
        if len(x) < start:  # the curve was restarted: its old points may still widen the view
            start = 0
        self._seen[key] = len(x)
        self.include(x[start:], y[start:])

    def include(self, x: np.ndarray, y: np.ndarray) -> None:
        if not len(x):
            return
        keep = np.isfinite(x) & np.isfinite(y)
        if not keep.all():  # most curves have no gap: no copies of 100,000 points then
            if not keep.any():
                return
            x, y = x[keep], y[keep]
        b = self._bounds
        b[0], b[1] = min(b[0], float(x.min())), max(b[1], float(x.max()))
        b[2], b[3] = min(b[2], float(y.min())), max(b[3], float(y.max()))

    def apply(self, x_end: float | None = None, tight: bool = False) -> bool:
        """Move the view if the data left it; True when it moved. `x_end`: where the x axis will
        end (total steps); `tight`: fit the data exactly (a finished run)."""
        if not self.following or any(self._view.state["autoRange"]):
            self.following = False
            return False
        x_min, x_max, y_min, y_max = self._bounds
        if not math.isfinite(x_min):
            return False
        current = self._range
        if current is not None and not tight:
            cx0, cx1, cy0, cy1 = current
            if cx0 <= x_min and x_max <= cx1 and cy0 <= y_min and y_max <= cy1:
                return False  # everything is in view: leave it, nothing to repaint but the curves
        span = y_max - y_min
        pad = span * (0.05 if tight else 0.15) or (abs(y_max) * 0.1 or 1.0)
        x_lo = min(0.0, x_min) if x_min >= 0 else x_min
        if tight:
            x_hi = x_max if x_max > x_lo else x_lo + 1
        elif x_end is not None and x_end >= x_max:
            x_hi = float(x_end)
        else:
            x_hi = _nice_ceiling(max(x_max - x_lo, 1e-9) * 1.25) + x_lo
        wanted = (x_lo, x_hi, y_min - pad, y_max + pad)
        if wanted == current:
            return False  # a finished run drawn again (the rest of its curves): the view is right
        self._range = wanted
        self._view.setRange(xRange=(x_lo, x_hi), yRange=(y_min - pad, y_max + pad), padding=0)
        settle_axes(self._plot)
        return True
