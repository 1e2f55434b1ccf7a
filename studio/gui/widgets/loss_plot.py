"""The loss plot of a run (raw points and a smoothed line), the loss overlay of several runs,
and the plot-making helpers every plot of a run shares.

One-pixel pens and peak downsampling keep a 20,000-point curve at about a millisecond a paint.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QVBoxLayout, QWidget

from studio.core.runs.records.run_model import RunModel
from studio.core.runs.records.smoothing import DEFAULT_SMOOTHING, ema
from studio.gui.widgets.plot_items import TickGrid

# Downsampling bins per pixel: "peak" mode keeps each bin's min and max, so one bin per
# pixel already draws every spike (pyqtgraph's default of 5 draws 5x the points for nothing).
PEAKS_PER_PIXEL = 1.0
VALIDATION_COLOUR = "#ff9f1c"
RANK_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def make_plot(title: str, left: str, bottom: str) -> pg.PlotWidget:
    widget = pg.PlotWidget()
    item = widget.getPlotItem()
    item.setTitle(title)
    item.setLabel("left", left)
    item.setLabel("bottom", bottom)
    widget.tick_grid = TickGrid(item)  # not showGrid: its axis grid is most of the cost of a paint
    item.setClipToView(True)
    item.setDownsampling(auto=True, mode="peak")
    widget.setMinimumHeight(120)
    return widget


def make_curve(plot: pg.PlotWidget, colour: str, name: str | None = None,
           style: Qt.PenStyle = Qt.PenStyle.SolidLine) -> pg.PlotDataItem:
    # One-pixel pens only: a wider pen goes through Qt's stroker and paints about 10x slower
    # (12 ms against 1 ms for a 20,000-point curve), which a live plot cannot afford.
    return plot.plot([], [], pen=pg.mkPen(colour, width=1, style=style), name=name,
                     autoDownsampleFactor=PEAKS_PER_PIXEL)


def right_axis(plot: pg.PlotWidget, label: str, colour: str) -> tuple[pg.ViewBox, pg.PlotDataItem]:
    """A second curve with its own y axis on the right, sharing the plot's x axis."""
    item = plot.getPlotItem()
    view = pg.ViewBox()
    item.showAxis("right")
    item.scene().addItem(view)
    axis = item.getAxis("right")
    axis.linkToView(view)
    axis.setLabel(label)
    axis.setVisible(False)
    view.setXLink(item.getViewBox())
    view.setMouseEnabled(x=False, y=False)
    item.getViewBox().sigResized.connect(lambda *_: view.setGeometry(item.getViewBox().sceneBoundingRect()))
    curve = pg.PlotDataItem([], [], pen=pg.mkPen(colour, width=1, style=Qt.PenStyle.DashLine),
                            autoDownsampleFactor=PEAKS_PER_PIXEL)
    # Its own view is no plot item's: clip and downsample it as make_plot does its curves, or a
    # replay's 100,000 points (all NaN on a CPU run) are turned into a path at every paint (20 ms).
    curve.setClipToView(True)
    curve.setDownsampling(auto=True, method="peak")
    view.addItem(curve)
    return view, curve


class LossPlot(QWidget):
    """Loss per step: faint raw points and the smoothed line, smoothing set by a slider."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = make_plot("Loss", "loss", "step")
        self.plot.setObjectName("plot_loss")
        self.raw = self.plot.plot([], [], pen=pg.mkPen((120, 150, 200, 90), width=1),
                                  autoDownsampleFactor=PEAKS_PER_PIXEL)
        # Which line is which, once there are two: shown while the run has a validation loss.
        self.legend = self.plot.addLegend(offset=(5, 5))
        self.legend.setVisible(False)
        self.smooth = make_curve(self.plot, "#4fa3ff", "training loss (smoothed)")
        # The held-out images' loss at fixed noise (validation events): points joined by a line, beside the
        # training loss on the same axes.
        self.validation = self.plot.plot([], [], pen=pg.mkPen(VALIDATION_COLOUR, width=1), symbol="o", symbolSize=5,
                                         symbolBrush=VALIDATION_COLOUR, symbolPen=None,
                                         name="validation loss (held-out images)")
        self.smoothing = DEFAULT_SMOOTHING
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setObjectName("loss_smoothing")
        self.slider.setRange(0, 99)
        self.slider.setValue(int(self.smoothing * 100))
        self.slider.setToolTip("Smoothing of the loss line (0: none, 0.99: strong)")
        self.slider.valueChanged.connect(self._set_smoothing)
        self.smoothing_label = QLabel(f"smoothing {self.smoothing:.2f}")
        row = QHBoxLayout()
        row.addWidget(self.smoothing_label)
        row.addWidget(self.slider, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addLayout(row)
        self._ema = np.empty(0)
        self._ema_state: tuple[float, int] = (0.0, 0)
        self._ema_len = 0
        self._model: RunModel | None = None
        self._rewinds = 0  # the model's rewinds when the line was smoothed

    def _set_smoothing(self, value: int) -> None:
        self.smoothing = value / 100
        self.smoothing_label.setText(f"smoothing {self.smoothing:.2f}")
        self._ema_len, self._ema_state = 0, (0.0, 0)
        if self._model is not None:
            self.refresh(self._model)

    def reset(self) -> None:
        self._ema_len, self._ema_state = 0, (0.0, 0)

    def refresh(self, model: RunModel) -> None:
        if model is not self._model or model.rewinds != self._rewinds:
            self._model, self._rewinds = model, model.rewinds
            self.reset()
        steps, loss = model.steps.view(), model.loss.view()
        n = len(loss)
        if n < self._ema_len:
            self.reset()
        if len(self._ema) < n:
            grown = np.empty(max(n, 2 * len(self._ema), 1024))
            grown[: self._ema_len] = self._ema[: self._ema_len]
            self._ema = grown
        prepared = model.smoothed_loss
        if (self._ema_len == 0 and prepared is not None and prepared.smoothing == self.smoothing
                and len(prepared.values) <= n):  # smoothed where the run was read: go on from there
            self._ema[: len(prepared.values)] = prepared.values
            self._ema_len, self._ema_state = len(prepared.values), prepared.state
        _, self._ema_state = ema(loss, self.smoothing, self._ema_len, self._ema_state, self._ema)
        self._ema_len = n
        self.raw.setData(steps, loss, connect="finite")
        self.smooth.setData(steps, self._ema[:n], connect="finite")
        validation_steps = model.validation_steps.view()
        self.validation.setData(validation_steps, model.validation_loss.view(), connect="finite")
        if self.legend.isVisible() != bool(len(validation_steps)):
            self.legend.setVisible(bool(len(validation_steps)))

    def legend_names(self) -> list[str]:
        """The lines the legend names, as shown (none while it is hidden)."""
        if not self.legend.isVisible():
            return []
        return [label.text for _sample, label in self.legend.items]

    def points(self) -> int:
        return self._ema_len


class LossOverlay(QWidget):
    """The smoothed loss of several runs on one plot (Runs page)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = make_plot("Loss (overlay)", "loss", "step")
        self.plot.setObjectName("plot_overlay")
        self.plot.addLegend(offset=(5, 5))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)
        self.curves: list[pg.PlotDataItem] = []

    def close_plot(self) -> None:
        """Empty the plot's scene before the widget is deleted (see RunPlots.close_plots)."""
        self.curves = []
        self.plot.close()

    def show_runs(self, runs: list[tuple[str, RunModel]], smoothing: float = 0.9) -> None:
        if self.plot.plotItem is None:  # closed with its window: nothing is drawn any more
            return
        for curve in self.curves:
            self.plot.removeItem(curve)
        self.curves = []
        for i, (name, model) in enumerate(runs):
            prepared = model.smoothed_loss
            if prepared is not None and prepared.smoothing == smoothing and len(prepared.values) == len(model.loss):
                smooth = prepared.values
            else:
                smooth, _ = ema(model.loss.view(), smoothing)
            colour = RANK_COLOURS[i % len(RANK_COLOURS)]
            curve = make_curve(self.plot, colour, name)
            curve.setData(model.steps.view(), smooth, connect="finite")
            self.curves.append(curve)
            if len(model.validation_loss):  # the validation loss of each run, dashed, in the run's colour
                dashed = make_curve(self.plot, colour, f"{name} (validation)", Qt.PenStyle.DashLine)
                dashed.setData(model.validation_steps.view(), model.validation_loss.view(), connect="finite")
                self.curves.append(dashed)
