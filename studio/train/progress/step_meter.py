"""What the trainer reports about its steps, read back from the GPU only every few steps.

Reading a number back from the GPU (`.item()`) makes the CPU wait until every queued
kernel has run, so it cannot prepare the next step meanwhile. Each step's loss stays on
the device; at a reporting step (about twice a second, and always at the first step,
before samples, checkpoints and the end) one call brings back the losses of the steps
since the last report from every rank, whether any rank wants to stop, and every rank's
memory after each of those steps. Every step still gets its own step event.

Throughput is measured over the last ~20 steps (the first step of a run, which compiles
and warms up, leaves the window as soon as others fill it), without the time spent on
samples and checkpoints: images/s of the whole run, model TFLOP/s per GPU and MFU.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from studio.core.config.schema import TrainConfig
from studio.core.estimate.throughput import (
    GpuPeak,
    forward_tflop,
    gpu_peak,
    is_counted_architecture,
    mfu,
    step_multiplier,
)
from studio.core.runs.events import Step
from studio.train.memory.rank_memory import memory_of_ranks, memory_row
from studio.train.runtime import effective_mixed_precision

WINDOW = 20  # steps of the moving throughput window
REPORT_INTERVAL_S = 0.5  # how often (at most) the losses are read back
MAX_STEPS_PER_REPORT = 50


@dataclass(frozen=True)
class StepCost:
    """Model FLOPs of a training step and what they are measured against."""

    tflop_per_pixel: float  # forward TFLOP per image pixel x the forwards a step costs
    peak: GpuPeak | None
    precision: str  # "no", "fp16" or "bf16": MFU only for the last two


def step_cost(config: TrainConfig, denoiser_params: int, device: torch.device) -> StepCost | None:
    """The model FLOPs of this run's steps, when its denoiser is the family's counted architecture."""
    family, training = config.model.family, config.training
    if not is_counted_architecture(family, denoiser_params):
        return None
    multiplier = step_multiplier(config.method.kind == "dreambooth", training.gradient_checkpointing,
                                 training.checkpointing_interval)
    peak = gpu_peak(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    return StepCost(forward_tflop(family, 1, 1) * multiplier, peak, effective_mixed_precision(config))


@dataclass
class _Pending:
    step: int
    epoch: int
    lr: float
    loss: torch.Tensor  # 0-d, on the device
    wall_time: float
    rates: tuple[float, float | None, float | None, float]  # see StepMeter._rates
    memory: list[float]  # this rank's memory_row after the step (host-side counters: no waiting)
    skipped: torch.Tensor | None = None  # 0-d bool on the device: fp16's gradient scaler skipped the step


@dataclass
class Report:
    """The outcome of one read-back: the step events, whether any rank wants to stop, the
    first step whose loss is not finite (the events stop before it), and which of the steps
    reported fp16's gradient scaler skipped."""

    steps: list[Step] = field(default_factory=list)
    stop: bool = False
    not_finite: tuple[int, float] | None = None
    skipped: set[int] = field(default_factory=set)


class StepMeter:
    def __init__(self, accelerator: Any, total_steps: int, cost: StepCost | None) -> None:
        self.accelerator = accelerator
        self.world = int(accelerator.num_processes)
        self.total = total_steps
        self.cost = cost
        self.pending: list[_Pending] = []
        # (seconds, images of all ranks, TFLOP of all ranks) of the latest steps, for the window.
        self.window: deque[tuple[float, int, float]] = deque(maxlen=WINDOW)
        self.next_report = 1
        self._mark = time.monotonic()
        self._paused = 0.0
        # Samples, validation and checkpoints between the steps of this leg, so far: the ETA counts their
        # share per step (a run sampling 50 s every 100 steps of 1 s has 50% more to wait than its steps).
        self._paused_total = 0.0
        self._steps_recorded = 0
        self._warm_up_pending = True  # the leg's first step: compiling, allocator and kernel warm-up
        self.images_done = 0  # images of every rank trained in this leg (the run summary's images/s)

    def start(self) -> None:
        """The loop begins: the first step is timed from here."""
        self._mark, self._paused = time.monotonic(), 0.0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside (samples, checkpoints, epoch outputs) is no training time."""
        began = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - began
            self._paused += spent
            self._paused_total += spent

    def record(self, step: int, epoch: int, lr: float, loss: torch.Tensor, images: int, image_pixels: int,
               skipped: torch.Tensor | None = None) -> None:
        """A finished optimizer step: this rank's `images` (of every micro-batch), with `image_pixels`
        the sum of their pixel counts; `skipped` says on the device whether the gradient scaler skipped it."""
        now = time.monotonic()
        seconds = max(1e-9, now - self._mark - self._paused)
        self._mark, self._paused = now, 0.0
        self._steps_recorded += 1
        all_images = images * self.world
        self.images_done += all_images
        tflop = self.cost.tflop_per_pixel * image_pixels * self.world if self.cost else 0.0
        if self._warm_up_pending and self.window:
            self.window.clear()  # the warm-up step leaves once a steady one arrives
            self._warm_up_pending = False
        self.window.append((seconds, all_images, tflop))
        memory = memory_row(self.accelerator.device)
        self.pending.append(_Pending(step, epoch, lr, loss, time.time(), self._rates(step), memory, skipped))

    def _rates(self, step: int) -> tuple[float, float | None, float | None, float]:
        """(images/s, TFLOP/s per GPU, MFU, ETA seconds) over the window as it stands at `step`."""
        seconds = sum(w[0] for w in self.window)
        images = sum(w[1] for w in self.window)
        per_second = images / seconds
        tflops = mfu_value = None
        if self.cost is not None:
            tflops = sum(w[2] for w in self.window) / seconds / self.world
            mfu_value = mfu(tflops, self.cost.peak, self.cost.precision)
        between = self._paused_total / max(1, self._steps_recorded)
        eta = (seconds / len(self.window) + between) * max(0, self.total - step)
        return per_second, tflops, mfu_value, eta

    def due(self, step: int, forced: bool) -> bool:
        """Whether `step` reads back (the same answer on every rank: it depends on steps only)."""
        return forced or step >= self.next_report

    def _interval_wish(self) -> float:
        """Steps until the next report, so that reports come about every REPORT_INTERVAL_S."""
        recent = list(self.window)[-len(self.pending):] or list(self.window)
        per_step = sum(w[0] for w in recent) / max(1, len(recent))
        return float(min(MAX_STEPS_PER_REPORT, max(1, round(REPORT_INTERVAL_S / max(per_step, 1e-6)))))

    def flush(self, stop_wanted: bool) -> Report:
        """Read back the pending steps (a collective call on every rank at the same step)."""
        if not self.pending:
            return Report()
        device = self.accelerator.device
        losses = torch.stack([p.loss.detach().to(torch.float64) for p in self.pending])
        no_skip = torch.zeros((), dtype=torch.bool, device=device)
        skips = torch.stack([(no_skip if p.skipped is None else p.skipped).to(torch.float64) for p in self.pending])
        extra = torch.tensor([1.0 if stop_wanted else 0.0, self._interval_wish(),
                              *(value for p in self.pending for value in p.memory)], dtype=torch.float64)
        row = torch.cat([losses, extra.to(device), skips]).unsqueeze(0)
        rows = self.accelerator.gather(row) if self.world > 1 else row
        values = rows.cpu().tolist()  # the one wait for the GPU
        n = len(self.pending)
        skipped = [any(r[len(r) - n + index] > 0 for r in values) for index in range(n)]  # the row's last n
        report = Report(stop=any(r[n] > 0 for r in values))
        width = len(self.pending[0].memory)
        for index, pending in enumerate(self.pending):
            loss = sum(r[index] for r in values) / len(values)
            if not math.isfinite(loss):
                report.not_finite = (pending.step, loss)
                break
            if skipped[index]:
                report.skipped.add(pending.step)
            per_second, tflops, mfu_value, eta = pending.rates
            report.steps.append(Step(
                step=pending.step, epoch=pending.epoch, loss=loss, lr=pending.lr,
                samples_per_s=round(per_second, 3), eta_s=round(eta, 1),
                memory=memory_of_ranks([r[n + 2 + index * width: n + 2 + (index + 1) * width] for r in values]),
                tflops=None if tflops is None else round(tflops, 2),
                mfu=None if mfu_value is None else round(mfu_value, 4),
                time=pending.wall_time,
            ))
        self.next_report = self.pending[-1].step + int(max(r[n + 1] for r in values))
        self.pending.clear()
        return report
