"""Time and cost of a run on rented GPUs: one row per GPU type x count, cheapest and fastest marked.

The work of a run is the number of images it shows the model. With N GPUs each
optimizer step sees N times the images, so the same work takes N times fewer
steps; the bundle's max_steps is scaled the same way (see export.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.schema import TrainConfig, effective_batch
from studio.core.export.gpu_catalogue import Catalogue, GpuType, Scaling

VramNeeded = Callable[[GpuType, int], int | None]  # MB per GPU with that many GPUs in all, or None when unknown


@dataclass(frozen=True)
class Workload:
    family: str
    method: str
    resolution: int
    images: int  # images shown to the model over the whole run
    batch_size: int  # per GPU
    gradient_accumulation: int
    gradient_checkpointing: bool
    mixed_precision: str

    def steps(self, total_gpus: int) -> int:
        per_step = effective_batch(self.batch_size, self.gradient_accumulation, total_gpus)
        return max(1, math.ceil(self.images / per_step))


def dataset_images(config: TrainConfig, base_dir: str | Path | None) -> int:
    """Images per epoch (repeats counted); 0 when the folders cannot be read."""
    from studio.core.dataset.scan import DatasetError, scan_dataset

    try:
        entries = scan_dataset(config.dataset, Path(base_dir) if base_dir else None)
    except (DatasetError, OSError):
        return 0
    return sum(e.repeats for e in entries)


def workload_from_config(
    config: TrainConfig, base_dir: str | Path | None = None, images_per_epoch: int | None = None
) -> Workload:
    """The work of a config as written (its max_steps count for its own launch.num_processes)."""
    t = config.training
    kind, amount = t.length
    if kind == "steps":
        images = amount * t.effective_batch(config.launch.num_processes)
    else:
        per_epoch = images_per_epoch if images_per_epoch is not None else dataset_images(config, base_dir)
        images = amount * max(per_epoch, 1)
    return Workload(
        family=config.model.family,
        method=config.method.kind,
        resolution=config.dataset.resolution,
        images=images,
        batch_size=t.batch_size,
        gradient_accumulation=t.gradient_accumulation,
        gradient_checkpointing=t.gradient_checkpointing,
        mixed_precision=t.mixed_precision,
    )


def seconds_per_image(gpu: GpuType, work: Workload, catalogue: Catalogue) -> tuple[float, bool]:
    """Seconds one GPU spends per image, and whether a measured figure was used."""
    speed = catalogue.speed
    reference, native = catalogue.speed_of(work.family)
    measured = work.family in gpu.measured
    base = gpu.measured[work.family] if measured else reference / gpu.throughput
    seconds = base * (work.resolution / native) ** 2
    if work.method == "dreambooth":
        seconds *= speed.dreambooth_factor
    if work.gradient_checkpointing:
        seconds *= speed.gradient_checkpointing_factor
    if work.mixed_precision == "no":
        seconds *= speed.full_precision_factor
    return seconds, measured


@dataclass(frozen=True)
class CostRow:
    gpu: GpuType
    per_node: int
    nodes: int
    fits: bool | None  # None: the VRAM estimate is not available
    vram_needed_mb: int | None
    steps: int
    speedup: float
    hours: float  # with the typical efficiency
    cost_min: float  # lowest price, highest efficiency of the band
    cost_max: float  # highest price, lowest efficiency
    measured: bool = False
    cheapest: bool = False
    fastest: bool = False
    hours_min: float = 0.0  # the band's highest efficiency
    hours_max: float = 0.0  # its lowest
    little_gain: bool = False  # more cost for little time saved against half as many GPUs

    @property
    def total_gpus(self) -> int:
        return self.per_node * self.nodes

    @property
    def cost_mid(self) -> float:
        return (self.cost_min + self.cost_max) / 2

    @property
    def label(self) -> str:
        count = f"{self.per_node}x" if self.nodes == 1 else f"{self.nodes} nodes x {self.per_node}"
        return f"{count} {self.gpu.name}"

    def to_dict(self) -> dict[str, object]:
        return {
            "gpu": self.gpu.id, "name": self.gpu.name, "per_node": self.per_node, "nodes": self.nodes,
            "total_gpus": self.total_gpus, "fits": self.fits, "vram_needed_mb": self.vram_needed_mb,
            "vram_gb": self.gpu.vram_gb, "steps": self.steps, "speedup": round(self.speedup, 3),
            "hours": round(self.hours, 4), "cost_min": round(self.cost_min, 2),
            "cost_max": round(self.cost_max, 2), "measured": self.measured,
            "cheapest": self.cheapest, "fastest": self.fastest,
            "hours_min": round(self.hours_min, 4), "hours_max": round(self.hours_max, 4),
            "little_gain": self.little_gain,
        }


def cost_row(
    gpu: GpuType, per_node: int, nodes: int, work: Workload, catalogue: Catalogue,
    vram_needed: int | None,
) -> CostRow:
    seconds, measured = seconds_per_image(gpu, work, catalogue)
    scaling, startup_s = catalogue.scaling, catalogue.speed.startup_minutes * 60
    speedup = scaling.speedup(per_node, nodes, gpu.infiniband)
    slowest, fastest = scaling.speedup_range(per_node, nodes, gpu.infiniband)

    def hours_at(speed: float) -> float:
        return (work.images * seconds / speed + startup_s) / 3600

    gpus = per_node * nodes
    hours_min, hours_max = hours_at(fastest), hours_at(slowest)
    return CostRow(
        gpu=gpu, per_node=per_node, nodes=nodes,
        fits=None if vram_needed is None else vram_needed <= gpu.vram_mb,
        vram_needed_mb=vram_needed, steps=work.steps(gpus), speedup=speedup, hours=hours_at(speedup),
        cost_min=hours_min * gpus * gpu.price_min, cost_max=hours_max * gpus * gpu.price_max, measured=measured,
        hours_min=hours_min, hours_max=hours_max,
    )


def cost_table(
    work: Workload,
    catalogue: Catalogue,
    vram_needed: VramNeeded | None = None,
    counts: Iterable[int] = (1, 2, 4, 8),
    nodes: int = 1,
    gpu_ids: Iterable[str] | None = None,
) -> list[CostRow]:
    """Rows for every catalogue GPU (or `gpu_ids`) x GPU count per node, best ones marked."""
    wanted = set(gpu_ids) if gpu_ids is not None else None
    rows = []
    for gpu in catalogue.gpus:
        if wanted is not None and gpu.id not in wanted:
            continue
        for count in counts:
            if count <= gpu.max_per_node:
                needed = vram_needed(gpu, count * nodes) if vram_needed else None
                rows.append(cost_row(gpu, count, nodes, work, catalogue, needed))
    return mark_best(rows, catalogue.scaling)


def mark_best(rows: list[CostRow], scaling: Scaling | None = None) -> list[CostRow]:
    """Mark rows whose extra GPUs buy little time, then the cheapest (by mid price) and the fastest row
    among those that may fit and are worth their GPUs."""
    scaling = scaling or Scaling()
    rows = [replace(r, little_gain=_little_gain(r, rows, scaling)) for r in rows]
    usable = [r for r in rows if r.fits is not False]
    if not usable:
        return rows
    cheapest = min(usable, key=lambda r: (round(r.cost_mid, 6), r.total_gpus, r.hours))
    worth = [r for r in usable if not r.little_gain] or usable
    fastest = min(worth, key=lambda r: (round(r.hours, 6), r.cost_mid))
    return [replace(r, cheapest=r is cheapest, fastest=r is fastest) for r in rows]


def _little_gain(row: CostRow, rows: list[CostRow], scaling: Scaling) -> bool:
    """Against the same GPU with fewer GPUs per node (the largest count below), does this row cost
    much more for little time saved?"""
    fewer = [r for r in rows if r.gpu.id == row.gpu.id and r.nodes == row.nodes and r.per_node < row.per_node]
    if not fewer:
        return False
    smaller = max(fewer, key=lambda r: r.per_node)
    cost_rise = row.cost_mid / smaller.cost_mid - 1 if smaller.cost_mid else 0.0
    time_gain = 1 - row.hours / smaller.hours if smaller.hours else 0.0
    return cost_rise >= scaling.diminishing_cost_rise and time_gain < scaling.diminishing_time_gain


def vram_estimator(config: ResolvedConfig) -> VramNeeded:
    """Per-GPU VRAM the studio's estimator gives for `config` on each GPU type and count (a DreamBooth
    that does not fit as data parallel is counted sharded, as the bundle would run it)."""
    from studio.core.estimate.estimate import ArchitectureDataError, estimate_vram
    from studio.core.estimate.sharded.sharded_estimate import run_config
    from studio.core.hardware.report import GPUInfo

    def needed(gpu: GpuType, gpus: int = 1) -> int | None:
        info = GPUInfo(index=0, name=gpu.name, total_mb=gpu.vram_mb, free_mb=gpu.vram_mb, bf16=gpu.bf16)
        try:
            return int(estimate_vram(run_config(config, info, gpus), info).total_mb)
        except ArchitectureDataError:  # shipped data missing: the table shows "?"
            return None

    return needed


def format_duration(hours: float, longest: float | None = None) -> str:
    """`40 min`, `2.5 h`, or a range `40-52 min` when `longest` differs."""
    if longest is not None and abs(longest - hours) * 60 >= 1:
        if longest * 60 < 90:
            return f"{hours * 60:.0f}-{longest * 60:.0f} min"
        return f"{hours:.1f}-{longest:.1f} h"
    minutes = hours * 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    return f"{hours:.1f} h"


def assumptions(catalogue: Catalogue, work: Workload) -> list[str]:
    """What the estimate takes for granted, in words shown beside the table."""
    s, sc = catalogue.speed, catalogue.scaling
    reference, native = catalogue.speed_of(work.family)
    eff = ", ".join(f"{c} GPU{'s' if c > 1 else ''}: {e * 100:.0f}% ({lo * 100:.0f}-{hi * 100:.0f}%)"
                    for c, e, lo, hi in zip(sc.gpu_counts, sc.efficiency, sc.efficiency_low, sc.efficiency_high,
                                            strict=True) if c > 1)
    return [
        f"Work: {work.images} images at {work.resolution}px ({work.family}, {work.method}); more GPUs take "
        "proportionally fewer steps for the same work.",
        f"Speed: {reference:.2f} s per image on the reference GPU ({s.reference_gpu}) at "
        f"{native}px for LoRA in mixed precision, divided by each GPU's relative "
        "throughput unless a measured figure exists; scales with pixels.",
        f"Factors: DreamBooth x{s.dreambooth_factor}, gradient checkpointing x{s.gradient_checkpointing_factor}, "
        f"no mixed precision x{s.full_precision_factor}; plus {s.startup_minutes:.0f} min start-up.",
        f"Data-parallel efficiency on one node, typical (range): {eff}; across nodes "
        f"x{sc.cross_node_infiniband} with InfiniBand, x{sc.cross_node_ethernet} without. Times and costs "
        "show the range; a row marked 'little gain' costs "
        f"{sc.diminishing_cost_rise * 100:.0f}% more or above for under {sc.diminishing_time_gain * 100:.0f}% "
        "less time than half as many GPUs, and is never called fastest.",
        f"Prices: on-demand {catalogue.currency} per GPU-hour noted {catalogue.prices_noted} "
        f"({catalogue.source.name}); cost = hours x GPUs x price.",
    ]


def format_cost(row: CostRow) -> str:
    low, high = f"{row.cost_min:.2f}", f"{row.cost_max:.2f}"
    return low if low == high else f"{low}-{high}"


def format_table(rows: list[CostRow], currency: str = "USD") -> str:
    """The table as text for the command line."""
    header = ("GPUs", "fits", "VRAM need/have", "steps", "time", f"cost {currency}", "")
    lines = [header]
    for r in rows:
        need = "?" if r.vram_needed_mb is None else f"{r.vram_needed_mb / 1024:.1f}"
        fits = {True: "yes", False: "NO", None: "?"}[r.fits]
        cost = format_cost(r)
        marks = " ".join(m for m, on in (("cheapest", r.cheapest), ("fastest", r.fastest),
                                          ("little gain", r.little_gain)) if on)
        lines.append((r.label, fits, f"{need}/{r.gpu.vram_gb:.0f} GB", str(r.steps),
                      format_duration(r.hours_min, r.hours_max), cost, marks))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )
