"""The live plots: staggered redraws, a view that follows the data, the grid, the VRAM warning."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSizeF, Qt
from PySide6.QtWidgets import QGraphicsWidget
from pytestqt.qtbot import QtBot

from studio.core.runs.events import RankMemory, RunFinished, RunStarted, Step
from studio.core.runs.records.run_model import RunModel
from studio.core.runs.records.smoothing import ema
from studio.gui.widgets.run_plots import RunPlots


def _model(steps: int, total: int = 100) -> RunModel:
    model = RunModel()
    model.apply(RunStarted(config={}, world_size=1, total_steps=total, devices=["cuda:0"], time=1000.0))
    for i in range(1, steps + 1):
        model.apply(Step(step=i, epoch=1, loss=1.0 / i, lr=1e-4 * i, samples_per_s=3.0 + i % 2, time=1000.0 + i,
                         memory=[RankMemory(rank=0, device="cuda:0", allocated_mb=4000.0 + i, peak_mb=5000.0)]))
    return model


def _plots(qtbot: QtBot) -> RunPlots:
    plots = RunPlots(live=False)
    qtbot.addWidget(plots)
    plots.resize(1000, 700)
    plots.show()
    return plots


def _lengths(plots: RunPlots) -> list[int]:
    memory = plots._rank_curves.get(0)
    return [len(plots.loss.raw.getData()[1] if plots.loss.raw.getData()[1] is not None else []),
            len(plots.lr_curve.getData()[1] if plots.lr_curve.getData()[1] is not None else []),
            len(plots.throughput_curve.getData()[1] if plots.throughput_curve.getData()[1] is not None else []),
            len(memory[0].getData()[1]) if memory else 0]


def test_live_refresh_draws_one_plot_now_and_the_rest_soon(qtbot: QtBot) -> None:
    plots, model = _plots(qtbot), _model(30)
    plots.refresh(model, stagger=True)
    assert sorted(_lengths(plots)) == [0, 0, 0, 30]  # one plot per pass: the window never waits on all four
    qtbot.waitUntil(lambda: _lengths(plots) == [30, 30, 30, 30], timeout=2000)
    model.apply(Step(step=31, epoch=1, loss=0.01, lr=1e-4, time=1031.0))
    plots.refresh(model)  # not live (a replay, the end of a run): everything at once
    assert _lengths(plots)[:3] == [31, 31, 31]


def test_view_follows_the_data_until_the_person_moves_it(qtbot: QtBot) -> None:
    plots, model = _plots(qtbot), _model(10, total=100)
    plots.refresh(model)
    view = plots.loss.plot.getPlotItem().getViewBox()
    (x0, x1), (y0, y1) = view.viewRange()
    assert x0 == 0 and x1 == 100  # the axis already spans the whole run: it does not jump every step
    assert y0 < 0.1 and y1 > 1.0  # every loss point is in view
    model.apply(Step(step=11, epoch=1, loss=3.0, lr=1e-4, time=1011.0))  # a spike above the view
    plots.refresh(model)
    assert view.viewRange()[1][1] > 3.0
    view.setRange(xRange=(2, 5), padding=0)
    view.sigRangeChangedManually.emit([True, True])  # what a pan or a wheel zoom emits
    model.apply(Step(step=12, epoch=1, loss=9.0, lr=1e-4, time=1012.0))
    plots.refresh(model)
    assert view.viewRange()[0] == [2, 5]  # the person's view stays
    plots.refresh(_model(3))  # another run: following again
    assert view.viewRange()[0] == [0, 100]


def test_finished_run_is_fitted_tightly(qtbot: QtBot) -> None:
    plots, model = _plots(qtbot), _model(40, total=100)
    model.apply(RunFinished(status="stopped", step=40, time=1041.0))
    plots.refresh(model)
    x0, x1 = plots.lr.getPlotItem().getViewBox().viewRange()[0]
    assert x0 == 0 and x1 == 40  # stopped at 40 of 100: no empty space to the right


def test_grid_lines_sit_on_the_axis_ticks(qtbot: QtBot) -> None:
    plots = _plots(qtbot)
    plots.refresh(_model(10, total=100))
    qtbot.wait(50)
    grid = plots.lr.tick_grid
    x, _y = grid.getData()
    axis = plots.lr.getPlotItem().getAxis("bottom")
    ticks = axis.tickValues(0, 100, plots.lr.getPlotItem().getViewBox().width())[0][1]
    assert set(ticks) <= set(np.round(x, 9).tolist())


def test_memory_over_95_percent_warns(qtbot: QtBot) -> None:
    plots = _plots(qtbot)
    plots.set_vram_fraction(0.5)
    assert plots.warning.isHidden()
    plots.set_vram_fraction(0.97)
    assert not plots.warning.isHidden() and "97% full" in plots.warning.text()


class _FakeNvml:
    """pynvml's calls the sampler uses, for one 24 GB card whose use the test sets."""

    def __init__(self) -> None:
        self.used = 10 * 2**30

    def nvmlInit(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, _handle: int) -> str:
        return "Fake RTX 4090"

    def nvmlDeviceGetMemoryInfo(self, _handle: int) -> object:
        from types import SimpleNamespace

        return SimpleNamespace(total=24 * 2**30, used=self.used)


def test_nvml_memory_is_drawn_against_the_card_and_warns_past_95_percent(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    nvml = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    plots = RunPlots(live=True)
    qtbot.addWidget(plots)
    plots.show()
    model = _model(5)
    plots.refresh(model)
    assert plots.sampler is not None and plots.sampler.start()
    try:
        qtbot.waitUntil(lambda: 0 in plots._gpu_curves, timeout=2000)  # drawn without a new event
        assert plots._gpu_curves[0].getData()[1][-1] == 10 * 1024
        assert plots.vram_line.isVisible() and plots.vram_line.value() == 24 * 1024
        assert plots.memory.getPlotItem().getViewBox().viewRange()[1][1] >= 24 * 1024  # the card's total in view
        assert plots.warning.isHidden()
        nvml.used = int(23.5 * 2**30)
        plots.sampler.sample()
        qtbot.waitUntil(lambda: not plots.warning.isHidden(), timeout=2000)
        assert "98% full" in plots.warning.text()
    finally:
        plots.sampler.stop()


def test_memory_legend_names_what_each_device_reports(qtbot: QtBot) -> None:
    plots, model = _plots(qtbot), RunModel()
    model.apply(RunStarted(config={}, world_size=2, total_steps=10, devices=["cpu", "cuda:0"], time=1000.0))
    model.apply(Step(step=1, epoch=1, loss=1.0, lr=1e-4, time=1001.0, memory=[
        RankMemory(rank=0, device="cpu", rss_mb=812.0),
        RankMemory(rank=1, device="cuda:0", allocated_mb=4000.0, peak_mb=5000.0),
    ]))
    plots.refresh(model)
    assert plots._rank_curves[0][0].name() == "rank 0 RSS"
    assert plots._rank_curves[1][0].name() == "rank 1 allocated"
    assert plots._rank_curves[0][0].getData()[1].tolist() == [812.0]


def test_throughput_shows_images_per_second_and_mfu_on_its_own_axis(qtbot: QtBot) -> None:
    plots, model = _plots(qtbot), _model(10)
    plots.refresh(model)
    axis = plots.throughput.getPlotItem().getAxis("right")
    assert not axis.isVisible()  # no step carries MFU (a CPU run, an unknown GPU)
    assert np.array_equal(plots.throughput_curve.getData()[1], model.samples_per_s.view(), equal_nan=True)
    for i in range(11, 21):
        model.apply(Step(step=i, epoch=1, loss=0.1, lr=1e-4, samples_per_s=9.5, tflops=128.0, mfu=0.162,
                         time=1000.0 + i))
    plots.refresh(model)
    percent = plots.mfu_curve.getData()[1]
    assert np.isnan(percent[:10]).all() and percent[10:].tolist() == pytest.approx([16.2] * 10)
    assert axis.isVisible() and axis.labelText == "MFU %"
    low, high = plots.mfu_view.viewRange()[1]
    assert low == 0.0 and high >= 16.2


def test_a_remote_machines_gpus_are_drawn_in_place_of_this_ones_and_back(qtbot: QtBot) -> None:
    from studio.core.remote.gpu import GpuSample
    from studio.gui.runner.remote_gpu import RemoteGpuSampler

    plots = RunPlots(live=True)
    qtbot.addWidget(plots)
    plots.show()
    model = _model(5)
    plots.refresh(model)
    own = plots.sampler
    remote = RemoteGpuSampler("pod", plots)
    plots.use_sampler(remote)
    assert plots.sampler is remote and remote.start()
    t = model.first_time or 0.0
    remote.feed([GpuSample(i, "NVIDIA H100 80GB HBM3", 40_000.0 + i, 81_559.0, t + 1) for i in range(2)])
    qtbot.waitUntil(lambda: len(plots._gpu_curves) == 2, timeout=2000)
    assert plots._gpu_curves[1].getData()[1].tolist() == [40_001.0]
    assert plots.vram_line.isVisible() and plots.vram_line.value() == 81_559.0
    assert remote.gpus[0].name == "pod: NVIDIA H100 80GB HBM3"
    remote.stop()
    remote.feed([GpuSample(0, "NVIDIA H100 80GB HBM3", 1.0, 81_559.0, t + 2)])  # not following: dropped
    assert len(remote.gpus[0].used) == 1
    plots.use_sampler(None)  # the next local run: this machine's NVML again
    assert plots.sampler is own and plots._gpu_curves == {}


def test_a_run_on_gpus_2_and_3_draws_and_warns_about_those_two_only(qtbot: QtBot) -> None:
    from studio.core.remote.gpu import GpuSample
    from studio.gui.runner.remote_gpu import RemoteGpuSampler

    plots = RunPlots(live=True)
    qtbot.addWidget(plots)
    plots.show()
    model = RunModel()
    model.apply(RunStarted(config={"launch": {"num_processes": 2, "gpu_ids": "2,3"}}, world_size=2, total_steps=100,
                           devices=["cuda:0", "cuda:1"], time=1000.0))
    model.apply(Step(step=1, epoch=0, loss=0.1, lr=1e-4, time=1001.0, tflops=346.0, mfu=0.35,
                     memory=[RankMemory(rank=r, device=f"cuda:{r}", allocated_mb=30_000.0, reserved_mb=36_000.0,
                                        peak_mb=40_000.0, rss_mb=9_000.0) for r in range(2)]))
    remote = RemoteGpuSampler("pod", plots)
    plots.use_sampler(remote)
    remote.start()
    plots.refresh(model)
    # Eight H100s: another person's job fills GPU 0; this run's GPUs 2 and 3 have room.
    used = {0: 80_000.0, 2: 41_000.0, 3: 41_500.0}
    remote.feed([GpuSample(i, "NVIDIA H100 80GB HBM3", used.get(i, 500.0), 81_559.0, 1002.0) for i in range(8)])
    qtbot.waitUntil(lambda: bool(plots._gpu_curves), timeout=2000)
    assert sorted(plots._gpu_curves) == [2, 3]
    assert plots._gpu_curves[3].getData()[1].tolist() == [41_500.0]
    assert plots.warning.isHidden()  # GPU 0 at 98% is no reason to lower this run's batch size


def _finished_two_rank_model(steps: int) -> RunModel:
    model = RunModel()
    model.apply(RunStarted(config={}, world_size=2, total_steps=steps, devices=["cuda:0", "cuda:1"], time=1000.0))
    for i in range(1, steps + 1):
        model.apply(Step(step=i, epoch=1, loss=0.5, lr=1e-4, samples_per_s=3.0, time=1000.0 + i,
                         memory=[RankMemory(rank=r, device=f"cuda:{r}", allocated_mb=9000.0 + i + r, peak_mb=11000.0)
                                 for r in range(2)]))
    model.apply(RunFinished(status="completed", step=steps, time=1000.0 + steps))
    return model


def test_a_staggered_redraw_makes_the_memory_curves_over_several_ticks(qtbot: QtBot) -> None:
    plots, model = _plots(qtbot), _finished_two_rank_model(50)
    made: list[int] = []
    plots.refresh(model, stagger=True)
    while plots._stale():
        made.append(sum(len(curves) for curves in plots._rank_curves.values()))
        plots._draw_next()
    made.append(sum(len(curves) for curves in plots._rank_curves.values()))
    assert made[-1] == 4 and all(b - a <= 1 for a, b in itertools.pairwise(made))  # one curve a tick
    names = [curve.name() for rank in (0, 1) for curve in plots._rank_curves[rank]]
    assert names == ["rank 0 allocated", "rank 0 peak", "rank 1 allocated", "rank 1 peak"]
    assert plots._rank_curves[1][0].getData()[1].tolist() == [9001.0 + i for i in range(1, 51)]  # every point
    assert plots._rank_curves[0][1].getData()[1].tolist() == [11000.0] * 50


def test_a_replay_shows_the_loss_line_smoothed_where_it_was_read(qtbot: QtBot, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.runs.records.run_model import replay_run
    from studio.gui.widgets import loss_plot

    lines = [RunStarted(config={}, world_size=1, total_steps=300, devices=["cpu"], time=1.0).to_json()]
    lines += [Step(step=i, epoch=1, loss=0.2 + (i % 7) / 10, lr=1e-4, time=1.0 + i).to_json() for i in range(1, 301)]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = replay_run(tmp_path).model
    smoothed_here: list[int] = []
    real_ema = loss_plot.ema

    def counting_ema(values: np.ndarray, smoothing: float, start: int = 0, *args: object) -> object:
        smoothed_here.append(len(values) - start)
        return real_ema(values, smoothing, start, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(loss_plot, "ema", counting_ema)
    plots = _plots(qtbot)
    plots.refresh(model)
    assert max(smoothed_here) == 0  # no point smoothed on the GUI thread
    assert model.smoothed_loss is not None
    assert np.array_equal(plots.loss.smooth.getData()[1], model.smoothed_loss.values)
    plots.loss.slider.setValue(50)  # another smoothing: smoothed here, all 300 points
    assert smoothed_here[-1] == 300
    np.testing.assert_allclose(plots.loss.smooth.getData()[1], real_ema(model.loss.view(), 0.5)[0], rtol=1e-12)


def test_the_axes_make_room_for_their_labels_before_the_first_paint(qtbot: QtBot) -> None:
    plots, model = _plots(qtbot), _finished_two_rank_model(50)
    qtbot.wait(50)  # the empty plots painted
    axis = plots.memory.getPlotItem().getAxis("left")
    view = plots.memory.getPlotItem().getViewBox()
    before = axis.width()
    plots.refresh(model)  # memory in the 9,000s: wider labels than the empty plot's
    laid_out = (axis.width(), view.geometry().left())
    assert laid_out[0] > before
    qtbot.wait(100)  # painted: the plot was laid out once, not again after its first paint
    assert (axis.width(), view.geometry().left()) == laid_out



def test_a_plot_title_whose_python_state_is_gone_still_answers_qts_layout(qtbot: QtBot) -> None:
    """Python's cycle collector empties the objects of a dropped cycle (their attributes) one by one, in an
    order of its own, and deletes the Qt objects as their last references go: a plot's layout can then ask a
    title or legend line for its size after its attributes are gone. pyqtgraph's answer raised AttributeError
    in Qt's event loop ('LabelItem' object has no attribute '_sizeHint'): eight of them, the four titles and
    four legend lines of a run's plots, failed a remote-run test in a whole-suite run."""
    plots = _plots(qtbot)
    plots.refresh(_model(10))
    item, legend = plots.lr.getPlotItem(), plots.memory.getPlotItem().legend
    labels = [item.titleLabel, *(label for _sample, label in legend.items)]
    assert len(labels) == 3  # the title, "rank 0 allocated", "rank 0 peak"
    kept = [dict(label.__dict__) for label in labels]  # their attributes, put back before the plots close
    try:
        for label in labels:
            label.__dict__.clear()  # what the collector does to each object of a cycle it frees
            QGraphicsWidget.updateGeometry(label)  # its size is asked for again
        for layout in (item.layout, legend.layout):  # laid out again now, as a layout is while its items go
            layout.invalidate()
            layout.activate()  # pytest-qt fails the test on any exception raised in a call from Qt
        sizes = [label.size() for label in labels]
        assert [label.sizeHint(Qt.SizeHint.PreferredSize, QSizeF()) for label in labels] == sizes  # as it is
        assert all(size.width() > 0 for size in sizes)
    finally:
        for label, attributes in zip(labels, kept, strict=True):
            label.__dict__.update(attributes)


def test_a_resumed_runs_loss_line_is_smoothed_over_the_steps_it_kept(qtbot: QtBot) -> None:
    # Drawn up to step 30, killed; resumed from the checkpoint at 20 with 15 steps read before the
    # next redraw (more than were dropped): the line is the smoothing of what the run kept, step by step.
    plots, model = _plots(qtbot), _model(30)
    plots.refresh(model)
    model.apply(RunStarted(config={}, world_size=1, total_steps=100, devices=["cuda:0"], resumed_from_step=20,
                           time=2000.0))
    for i in range(21, 36):
        model.apply(Step(step=i, epoch=1, loss=5.0 if i <= 30 else 0.5, lr=1e-4, time=2000.0 + i))
    plots.refresh(model)
    steps, smooth = plots.loss.smooth.getData()
    assert steps.tolist() == list(range(1, 36))
    expected, _ = ema(np.array([1.0 / i for i in range(1, 21)] + [5.0] * 10 + [0.5] * 5), plots.loss.smoothing)
    np.testing.assert_allclose(smooth, expected)
    assert plots.loss.plot.getPlotItem().getViewBox().viewRange()[1][1] > 5.0  # the steps trained again are in view
