"""Live plots of a run: loss (raw and smoothed, `loss_plot.py`), learning rate, memory per rank, throughput
(images/s, and MFU on its own axis when the trainer knows the model's FLOPs and the GPU's peak).

Views never redraw per event: the controller's timer calls `refresh(model)` at most 20
times a second, and each curve gets one `setData` on the model's numpy buffers.
"""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from studio.core.runs.records.run_model import RunModel
from studio.gui.runner.gpu_memory import GpuMemorySampler
from studio.gui.widgets.loss_plot import RANK_COLOURS, LossPlot, make_curve, make_plot, right_axis
from studio.gui.widgets.plot_items import FollowRange

VRAM_WARN_FRACTION = 0.95
# Gap between the redraws of two plots of a live run (see RunPlots.refresh): each of the
# four plots is redrawn about 6 times a second, and the window gets time in between.
STAGGER_MS = 40


class RunPlots(QWidget):
    """The four plots of a run, fed from a RunModel; NVML memory is added while live."""

    def __init__(self, parent: QWidget | None = None, live: bool = True) -> None:
        super().__init__(parent)
        self.setObjectName("run_plots")
        self.loss = LossPlot()
        self.lr = make_plot("Learning rate", "lr", "step")
        self.lr_curve = make_curve(self.lr, "#2ca02c")
        self.memory = make_plot("Memory", "MB", "seconds")
        self.memory.setObjectName("plot_memory")
        self.memory.addLegend(offset=(5, 5))
        self.throughput = make_plot("Throughput", "images/s", "step")
        self.throughput_curve = make_curve(self.throughput, "#9467bd", "images/s")
        self.mfu_view, self.mfu_curve = right_axis(self.throughput, "MFU %", "#e377c2")
        self.vram_line = pg.InfiniteLine(angle=0, pen=pg.mkPen("#d62728", width=1, style=Qt.PenStyle.DashLine),
                                         label="VRAM {value:.0f} MB", labelOpts={"position": 0.05})
        self.vram_line.setVisible(False)
        self.memory.addItem(self.vram_line)
        self.warning = QLabel()
        self.warning.setObjectName("vram_warning")
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet("background:#fdecea;color:#611a15;padding:4px;border-radius:3px")
        self.warning.setVisible(False)
        self._rank_curves: dict[int, list[pg.PlotDataItem]] = {}  # allocated (or RSS), peak
        self._gpu_curves: dict[int, pg.PlotDataItem] = {}
        self._model: RunModel | None = None
        self._rewinds = 0  # the model's rewinds the step plots last followed
        # The model version each plot last drew (see refresh's stagger).
        self._drawn: dict[str, int] = {"loss": -1, "memory": -1, "lr": -1, "throughput": -1}
        self._gpu_drawn = 0
        self._plots_closed = False
        self._stagger = QTimer(self)
        self._stagger.setSingleShot(True)
        self._stagger.setInterval(STAGGER_MS)
        self._stagger.timeout.connect(self._draw_next)
        self.sampler = GpuMemorySampler(self) if live else None
        self._own_sampler = self.sampler
        if self.sampler is not None:
            # NVML keeps sampling while the model is quiet (caching, loading): draw those points too.
            self.sampler.sig_sampled.connect(self._on_gpu_sample)
        self._follow = {
            name: FollowRange(widget.getPlotItem())
            for name, widget in (("loss", self.loss.plot), ("memory", self.memory), ("lr", self.lr),
                                 ("throughput", self.throughput))
        }

        top = QHBoxLayout()
        top.addWidget(self.loss, 3)
        top.addWidget(self.memory, 2)
        bottom = QHBoxLayout()
        bottom.addWidget(self.lr, 1)
        bottom.addWidget(self.throughput, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.warning)
        layout.addLayout(top, 3)
        layout.addLayout(bottom, 2)

    def use_sampler(self, sampler: GpuMemorySampler | None) -> None:
        """Draw the GPUs of `sampler` (a remote machine's), or this machine's again with None."""
        wanted = sampler or self._own_sampler
        if self.sampler is None or wanted is None or wanted is self.sampler:
            return
        self.sampler.stop()
        self.sampler.sig_sampled.disconnect(self._on_gpu_sample)
        for curve in self._gpu_curves.values():
            self.memory.removeItem(curve)
        self._gpu_curves.clear()
        self.sampler = wanted
        wanted.sig_sampled.connect(self._on_gpu_sample)

    def close_plots(self) -> None:
        """Empty the plots' scenes before the widgets are deleted; the plots draw nothing after.

        A pyqtgraph item deleted while its scene still has a queued update pending makes
        Qt call into a half-destroyed item ("pure virtual method called"); closing each
        plot first (pyqtgraph clears its scene there) leaves nothing for such an update.
        """
        self._stagger.stop()
        if self.sampler is not None:
            self.sampler.stop()
        if self._plots_closed:
            return
        self._plots_closed = True
        for widget in (self.loss.plot, self.memory, self.lr, self.throughput):
            widget.close()

    def clear(self) -> None:
        if self._plots_closed:  # the window is closing: nothing is drawn any more
            return
        for curves in self._rank_curves.values():
            for curve in curves:
                self.memory.removeItem(curve)
        for curve in self._gpu_curves.values():
            self.memory.removeItem(curve)
        self._rank_curves.clear()
        self._gpu_curves.clear()
        self._drawn = dict.fromkeys(self._drawn, -1)
        self._stagger.stop()
        self.loss.reset()
        for follow in self._follow.values():
            follow.reset()

    def refresh(self, model: RunModel, force: bool = False, stagger: bool = False) -> None:
        """Redraw the plots whose data changed; cheap when nothing did.

        With `stagger` (a live run) one plot is redrawn now and the others one by one
        from a timer: painting a plot of many points takes tens of milliseconds on a slow
        machine, and painting all four at once would freeze the window that long.
        """
        if self._plots_closed:  # the window is closing: nothing is drawn any more
            return
        if model is not self._model:
            self.clear()
            self._model = model
            self._rewinds = model.rewinds
        if model.rewinds != self._rewinds:
            self._rewinds = model.rewinds
            for follow in self._follow.values():
                follow.forget_seen()
        if force:
            self._drawn = dict.fromkeys(self._drawn, -1)
        if not stagger:
            self._stagger.stop()
            for name in self._stale():
                self._draw(name)
            return
        if not self._stagger.isActive():
            self._draw_next()

    def _stale(self) -> list[str]:
        """Plots that lag behind the model, the one drawn longest ago first."""
        model = self._model
        if model is None:
            return []
        version = model.version
        stale = [name for name, drawn in self._drawn.items() if drawn != version]
        if "memory" not in stale and self._gpu_points() != self._gpu_drawn:
            stale.append("memory")  # NVML samples arrive on their own clock
        return sorted(stale, key=lambda name: self._drawn[name])

    def _draw_next(self) -> None:
        if self._plots_closed:  # the window is closing: nothing is drawn any more
            return
        stale = self._stale()
        if stale:
            self._draw(stale[0], whole=False)
        if self._stale():  # the others, or the rest of a plot drawn in pieces
            self._stagger.start()

    def _draw(self, name: str, whole: bool = True) -> None:
        """Redraw plot `name`; without `whole` (a staggered tick) the memory plot makes at most one
        curve and stays stale until the next ticks have made the rest.

        The view is moved before the curves are set: each curve then clips and downsamples its
        points once, for the range it is shown at, not once for the old range and again.
        """
        model = self._model
        if model is None:
            return
        steps = model.steps.view()
        follow = self._follow[name]
        if name == "loss":
            follow.feed("loss", steps, model.loss.view())
        elif name == "lr":
            follow.feed("lr", steps, model.lr.view())
        elif name == "throughput":
            follow.feed("throughput", steps, model.samples_per_s.view())
        else:
            t0 = self._t0(model)
            for rank, series in model.memory.items():
                x = series.time.view() - t0
                follow.feed(("allocated", rank), x, series.allocated.view())
                follow.feed(("peak", rank), x, series.peak.view())
        total = float(model.total_steps) if model.total_steps and name != "memory" else None
        moved = follow.apply(x_end=total, tight=model.ended)
        if name == "loss":
            self.loss.refresh(model)
        elif name == "lr":
            self.lr_curve.setData(steps, model.lr.view(), connect="finite")
        elif name == "throughput":
            self.throughput_curve.setData(steps, model.samples_per_s.view(), connect="finite")
            self._draw_mfu(model)
        else:
            if moved and not whole and any(len(self._rank_curves.get(rank, ())) < 2 for rank in model.memory):
                return  # the view moved and its axes were laid out: the new curves from the next tick
            if not self._refresh_ranks(model, whole):
                return  # curves still to make: the next tick goes on
            if self._refresh_gpus(model):
                follow.apply(tight=model.ended)  # the GPUs' own samples, and the card's total
        self._drawn[name] = model.version

    def _draw_mfu(self, model: RunModel) -> None:
        """MFU in percent on the right axis; hidden while no step carries it (CPU, unknown GPU)."""
        percent = model.mfu.view() * 100.0
        known = percent[np.isfinite(percent)]
        axis = self.throughput.getPlotItem().getAxis("right")
        axis.setVisible(bool(len(known)))
        if len(known):
            self.mfu_view.setYRange(0.0, max(10.0, min(100.0, float(known.max()) * 1.25)), padding=0)
        self.mfu_curve.setData(model.steps.view(), percent, connect="finite")

    def _on_gpu_sample(self) -> None:
        if self._plots_closed:  # the window is closing: nothing is drawn any more
            return
        if self._model is not None and not self._model.ended:
            self.refresh(self._model, stagger=True)

    def _gpu_points(self) -> int:
        sampler = self.sampler
        return sum(len(g.times) for g in sampler.gpus) if sampler is not None else 0

    def _t0(self, model: RunModel) -> float:
        return model.first_time if model.first_time is not None else time.time()

    def _refresh_ranks(self, model: RunModel, whole: bool = True) -> bool:
        """Set every rank's curves; False when, not `whole`, curves were left to make.

        Making a curve (its legend entry, its scatter item, its menu entries) takes 5-10 ms,
        more than setting 100,000 points on one: a replay of 2 ranks would make 4 at once,
        so a staggered tick makes one and leaves the others to the next ticks.
        """
        t0 = self._t0(model)
        made = False
        for rank, series in model.memory.items():
            curves = self._rank_curves.setdefault(rank, [])
            colour = RANK_COLOURS[rank % len(RANK_COLOURS)]
            # A CPU rank reports its process memory (RSS), not CUDA allocations.
            names = (f"rank {rank} {'RSS' if series.device == 'cpu' else 'allocated'}", f"rank {rank} peak")
            styles = (Qt.PenStyle.SolidLine, Qt.PenStyle.DotLine)
            x = series.time.view() - t0
            for index, values in enumerate((series.allocated.view(), series.peak.view())):
                if index == len(curves):
                    if made and not whole:
                        return False
                    made = True
                    curves.append(make_curve(self.memory, colour, names[index], styles[index]))
                curves[index].setData(x, values, connect="finite")
        return True

    def _refresh_gpus(self, model: RunModel) -> bool:
        """Draw the NVML samples of a live run's GPUs; False when there are none to draw."""
        sampler = self.sampler
        self._gpu_drawn = self._gpu_points()
        if sampler is None or not sampler.available or model.ended:
            return False
        t0 = self._t0(model)
        worst = 0.0
        total_line = 0.0
        # A run on some of a shared machine's GPUs: the others' memory is other people's work, and
        # their being full is no reason to lower this run's batch size.
        chosen = model.chosen_gpus()
        for gpu in sampler.gpus:
            if chosen is not None and gpu.index not in chosen:
                other = self._gpu_curves.pop(gpu.index, None)
                if other is not None:  # drawn before the run said which GPUs it trains on
                    self.memory.removeItem(other)
                continue
            curve = self._gpu_curves.get(gpu.index)
            if curve is None:
                curve = make_curve(self.memory, "#d62728", f"GPU {gpu.index} used (NVML)", Qt.PenStyle.DashLine)
                self._gpu_curves[gpu.index] = curve
            times, used = gpu.times.view(), gpu.used.view()
            keep = times >= t0  # only this run's time span
            curve.setData(times[keep] - t0, used[keep])
            self._follow["memory"].feed(("nvml", gpu.index), times[keep] - t0, used[keep])
            if gpu.total_mb and len(used):
                worst = max(worst, float(used[-1]) / gpu.total_mb)
                total_line = max(total_line, gpu.total_mb)
        if total_line:
            self.vram_line.setValue(total_line)
            self.vram_line.setVisible(True)
            # The card's total stays in view: the headroom is what the person watches.
            self._follow["memory"].include(np.array([0.0]), np.array([total_line]))
        self.set_vram_fraction(worst)
        return True

    def set_vram_fraction(self, fraction: float) -> None:
        if self._plots_closed:  # the window is closing: nothing is drawn any more
            return
        over = fraction > VRAM_WARN_FRACTION
        if over:
            self.warning.setText(
                f"GPU memory is {fraction:.0%} full. Past the card's memory the driver spills into "
                "system RAM and training becomes 10-100x slower: lower the batch size or resolution, "
                "or turn on gradient checkpointing."
            )
        self.warning.setVisible(over)

    def plot_points(self) -> int:
        """Points handed to the plots (all curves)."""
        model = self._model
        if model is None:
            return 0
        return 4 * len(model.steps) + len(model.loss) + 2 * model.memory_points()
