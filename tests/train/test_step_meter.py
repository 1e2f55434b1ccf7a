"""The step path's bookkeeping: losses read back every few steps, throughput over the last 20 steps."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from studio.core.estimate.throughput import GpuPeak
from studio.train.progress import step_meter
from studio.train.progress.step_meter import StepCost, StepMeter

torch = pytest.importorskip("torch")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _meter(monkeypatch, total: int = 100, cost: StepCost | None = None, world: int = 1) -> tuple[StepMeter, Clock]:
    clock = Clock()
    monkeypatch.setattr(step_meter.time, "monotonic", clock)
    accelerator = SimpleNamespace(num_processes=world, device=torch.device("cpu"))
    meter = StepMeter(accelerator, total, cost)
    meter.start()
    return meter, clock


def _steps(meter: StepMeter, clock: Clock, first: int, last: int, seconds: float, images: int = 4,
           side: int = 64) -> None:
    for step in range(first, last + 1):
        clock.now += seconds
        meter.record(step, 0, 1e-4, torch.tensor(1.0 / step), images, images * side * side)


def test_throughput_is_a_moving_window_not_the_average_since_step_one(monkeypatch) -> None:
    meter, clock = _meter(monkeypatch)
    _steps(meter, clock, 1, 1, seconds=30.0)  # the first step compiles
    _steps(meter, clock, 2, 10, seconds=2.0)  # 2 img/s
    _steps(meter, clock, 11, 40, seconds=1.0)  # 4 img/s
    events = meter.flush(False).steps
    rate = {e.step: e.samples_per_s for e in events}
    assert rate[1] == pytest.approx(4 / 30, abs=1e-3)
    assert rate[2] == pytest.approx(2.0)  # the warm-up step left the window
    assert rate[25] == pytest.approx(80 / 25)  # steps 6-25: five at 2 s, fifteen at 1 s
    assert rate[40] == pytest.approx(4.0)  # only the last 20 steps count (the average since step 1: 2.4)
    assert events[-1].eta_s == pytest.approx(60.0)  # 60 steps left at 1 s


def test_time_spent_on_samples_is_not_training_time(monkeypatch) -> None:
    meter, clock = _meter(monkeypatch)
    _steps(meter, clock, 1, 5, seconds=1.0)
    with meter.paused():
        clock.now += 50.0  # a sample
    _steps(meter, clock, 6, 6, seconds=1.0)
    assert meter.flush(False).steps[-1].samples_per_s == pytest.approx(4.0)


def test_the_eta_counts_the_samples_and_checkpoints_between_the_steps(monkeypatch) -> None:
    """A run of 1 s steps that spends 10 s on a sample every 10 steps has 2 s left per step, not 1 s: the ETA
    the Train page showed ran out long before the run."""
    meter, clock = _meter(monkeypatch)
    for first in (1, 11):
        _steps(meter, clock, first, first + 9, seconds=1.0)
        with meter.paused():
            clock.now += 10.0  # a sample
    _steps(meter, clock, 21, 21, seconds=1.0)
    assert meter.flush(False).steps[-1].eta_s == pytest.approx((1.0 + 20.0 / 21) * 79, abs=0.1)  # not 79 s


def test_losses_stay_on_the_device_until_one_read_back(monkeypatch) -> None:
    meter, clock = _meter(monkeypatch, total=10)
    reads = []
    original = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(1) or original(self))
    for step in range(1, 8):
        clock.now += 0.01
        assert not meter.due(step, forced=False) or step == 1
        meter.record(step, 0, 1e-4, torch.tensor(step / 10), 2, 2 * 64 * 64)
        if step == 1:
            meter.flush(False)  # the first step is always reported
    assert reads == [1]
    events = meter.flush(False).steps
    assert reads == [1, 1]  # seven steps, two read-backs
    assert [e.step for e in events] == [2, 3, 4, 5, 6, 7]
    assert [e.loss for e in events] == pytest.approx([0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    assert all(e.memory and e.memory[0].rss_mb for e in events)  # every step keeps its own memory figures


def test_reports_come_about_twice_a_second(monkeypatch) -> None:
    meter, clock = _meter(monkeypatch)
    _steps(meter, clock, 1, 1, seconds=0.01)
    meter.flush(False)
    assert meter.next_report == 1 + step_meter.MAX_STEPS_PER_REPORT  # 10 ms steps: the cap
    meter, clock = _meter(monkeypatch)
    _steps(meter, clock, 1, 1, seconds=0.1)
    meter.flush(False)
    assert meter.next_report == 1 + 5
    assert not meter.due(5, forced=False) and meter.due(6, forced=False) and meter.due(2, forced=True)


def test_a_loss_that_is_not_finite_ends_the_report_there(monkeypatch) -> None:
    meter, clock = _meter(monkeypatch)
    for step, loss in ((1, 0.5), (2, math.nan), (3, 0.4)):
        clock.now += 1.0
        meter.record(step, 0, 1e-4, torch.tensor(loss), 1, 64 * 64)
    report = meter.flush(True)
    assert [e.step for e in report.steps] == [1]
    assert report.not_finite is not None and report.not_finite[0] == 2 and math.isnan(report.not_finite[1])
    assert report.stop


def test_tflops_and_mfu_follow_images_per_second(monkeypatch) -> None:
    # 0.5 TFLOP per pixel-step is absurd, but it makes the arithmetic plain.
    cost = StepCost(tflop_per_pixel=0.5 / (64 * 64), peak=GpuPeak("test", 100.0, ""), precision="bf16")
    meter, clock = _meter(monkeypatch, cost=cost, world=1)
    _steps(meter, clock, 1, 3, seconds=2.0, images=4)  # 2 img/s, 0.5 TFLOP each
    last = meter.flush(False).steps[-1]
    assert last.samples_per_s == pytest.approx(2.0)
    assert last.tflops == pytest.approx(1.0) and last.mfu == pytest.approx(0.01)
    meter, clock = _meter(monkeypatch, cost=None)
    _steps(meter, clock, 1, 2, seconds=1.0)
    assert meter.flush(False).steps[-1].tflops is None


def test_ranks_agree_on_losses_stop_and_the_next_report(monkeypatch) -> None:
    """Two ranks: one gather brings every rank's losses, memory, stop wish and report interval."""
    clock = Clock()
    monkeypatch.setattr(step_meter.time, "monotonic", clock)

    class TwoRanks:
        num_processes = 2
        device = torch.device("cpu")

        def gather(self, row: torch.Tensor) -> torch.Tensor:
            other = row.clone()
            n = 3  # rank 1: other losses, wants to stop, wants a longer interval
            other[0, :n] += 1.0
            other[0, n], other[0, n + 1] = 1.0, 40.0
            return torch.cat([row, other])

    meter = StepMeter(TwoRanks(), 100, None)
    meter.start()
    _steps(meter, clock, 1, 3, seconds=0.1)
    report = meter.flush(stop_wanted=False)
    assert report.stop  # rank 1's STOP reaches rank 0 at the same step
    assert [e.loss for e in report.steps] == pytest.approx([1 / s + 0.5 for s in (1, 2, 3)])  # the mean of ranks
    assert [m.rank for m in report.steps[0].memory] == [0, 1]
    assert meter.next_report == 3 + 40  # the larger wish: every rank reads back at the same step
    assert report.steps[-1].samples_per_s == pytest.approx(2 * 4 / 0.1)  # both ranks' images
