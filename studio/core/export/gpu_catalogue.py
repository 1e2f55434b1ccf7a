"""The GPU catalogue: rented GPU types, their prices and speeds, and the scaling model.

The shipped catalogue is `resources/gpu_catalogue.toml`; a copy in the user config
folder (STUDIO_CONFIG_DIR or the platform's) wins, so a person can keep prices current.
"""

from __future__ import annotations

import bisect
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.core.config.errors import ConfigError
from studio.core.config.files.toml_file import parse_toml
from studio.core.resources import resource_path
from studio.core.user_dirs import config_dir

CATALOGUE_FILE = "gpu_catalogue.toml"


class CatalogueError(ValueError):
    """A catalogue file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class GpuType:
    id: str
    name: str
    vram_gb: float
    bf16: bool
    throughput: float  # relative to the reference GPU for SD training
    price_min: float  # per GPU-hour
    price_max: float
    provider: str = ""
    infiniband: bool = False  # nodes of this offer are linked by InfiniBand
    max_per_node: int = 8
    sky: str = ""  # SkyPilot's name for this accelerator (`accelerators: H100:8`)
    # Measured seconds per image at the family's native resolution (LoRA), when known.
    measured: dict[str, float] = field(default_factory=dict)

    @property
    def vram_mb(self) -> int:
        return int(self.vram_gb * 1024)

    @property
    def price_mid(self) -> float:
        return (self.price_min + self.price_max) / 2


@dataclass(frozen=True)
class Scaling:
    """Data-parallel efficiency by GPU count on a node (a typical figure inside a band), and the cost
    of crossing nodes. Speed-up = GPUs x efficiency; between the listed counts it is interpolated."""

    gpu_counts: tuple[int, ...] = (1, 2, 4, 8)
    efficiency: tuple[float, ...] = (1.0, 0.925, 0.85, 0.78)
    # The band people measure (1.8-2.0x on 2 GPUs, 70-90 % up to 8): the table shows its range.
    efficiency_low: tuple[float, ...] = (1.0, 0.88, 0.78, 0.70)
    efficiency_high: tuple[float, ...] = (1.0, 0.97, 0.92, 0.88)
    cross_node_infiniband: float = 0.92
    cross_node_ethernet: float = 0.70
    # More GPUs are "not worth it" when the cost rises by this fraction or more while the time falls
    # by less than the next figure (compared with half as many GPUs of the same type).
    diminishing_cost_rise: float = 0.20
    diminishing_time_gain: float = 0.30

    def node_efficiency(self, per_node: int, band: tuple[float, ...] | None = None) -> float:
        """Efficiency of `per_node` GPUs on one node, interpolated between the listed counts."""
        counts, eff = self.gpu_counts, band or self.efficiency
        if per_node <= counts[0]:
            return eff[0]
        if per_node >= counts[-1]:
            return eff[-1]
        i = bisect.bisect_left(counts, per_node)
        if counts[i] == per_node:
            return eff[i]
        lo, hi = counts[i - 1], counts[i]
        return eff[i - 1] + (eff[i] - eff[i - 1]) * (per_node - lo) / (hi - lo)

    def speedup(self, per_node: int, nodes: int = 1, infiniband: bool = False,
                band: tuple[float, ...] | None = None) -> float:
        """How many times faster than one GPU `nodes` x `per_node` GPUs train."""
        factor = self.node_efficiency(per_node, band)
        if nodes > 1:
            factor *= self.cross_node_infiniband if infiniband else self.cross_node_ethernet
        return per_node * nodes * factor

    def speedup_range(self, per_node: int, nodes: int = 1, infiniband: bool = False) -> tuple[float, float]:
        """The lowest and highest speed-up of the band."""
        return (self.speedup(per_node, nodes, infiniband, self.efficiency_low),
                self.speedup(per_node, nodes, infiniband, self.efficiency_high))


@dataclass(frozen=True)
class SpeedModel:
    reference_gpu: str
    seconds_per_image: dict[str, float]
    native_resolution: dict[str, int]
    dreambooth_factor: float = 1.6
    gradient_checkpointing_factor: float = 1.3
    full_precision_factor: float = 2.0
    startup_minutes: float = 5.0


@dataclass(frozen=True)
class Catalogue:
    gpus: tuple[GpuType, ...]
    scaling: Scaling
    speed: SpeedModel
    prices_noted: str
    currency: str
    source: Path

    def speed_of(self, family: str) -> tuple[float, int]:
        """Seconds per image on the reference GPU and the native resolution of `family`; CatalogueError
        naming the file when this catalogue (a copy made before the family existed) has none."""
        try:
            return self.speed.seconds_per_image[family], self.speed.native_resolution[family]
        except KeyError:
            raise CatalogueError(
                f"{self.source}: [speed] has no figures for {family}: add {family} to seconds_per_image and "
                f"native_resolution (the shipped {CATALOGUE_FILE} has them), or delete your copy to use "
                "the shipped one") from None

    def get(self, name: str) -> GpuType:
        """A GPU type by id or name (case and spaces ignored); KeyError lists the known ones."""
        wanted = _norm(name)
        for gpu in self.gpus:
            if _norm(gpu.id) == wanted or _norm(gpu.name) == wanted:
                return gpu
        for gpu in self.gpus:  # "4090" or "H100" alone
            if wanted and wanted in _norm(gpu.name) and gpu.provider != "hyperscaler":
                return gpu
        known = ", ".join(g.id for g in self.gpus)
        raise KeyError(f"no GPU type '{name}' in {self.source}; known: {known}")


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def shipped_catalogue_path() -> Path:
    return resource_path(CATALOGUE_FILE)


def user_catalogue_path() -> Path:
    return config_dir() / CATALOGUE_FILE


def ensure_user_catalogue() -> Path:
    """The person's editable copy, made from the shipped one the first time."""
    path = user_catalogue_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shipped_catalogue_path(), path)
    return path


def load_catalogue(path: str | Path | None = None) -> Catalogue:
    """Read a catalogue: `path`, else the user's copy when it exists, else the shipped one."""
    if path is None:
        user = user_catalogue_path()
        path = user if user.is_file() else shipped_catalogue_path()
    path = Path(path)
    try:
        # -sig: prices saved by Notepad with a byte-order mark read as the same TOML
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise CatalogueError(f"{path}: GPU catalogue not found") from None
    except UnicodeDecodeError:
        raise CatalogueError(f"{path}: not UTF-8 text; save it as UTF-8") from None
    try:
        # A syntax error, or a price set twice (its line copied to change it, the old one left): the line and what
        # to do, as a config's file says it.
        data = parse_toml(text, str(path)).unwrap()
    except ConfigError as exc:
        raise CatalogueError(exc.describe()) from None
    return parse_catalogue(data, path)


def parse_catalogue(data: dict[str, Any], source: Path) -> Catalogue:
    try:
        speed_data = dict(data.get("speed", {}))
        speed = SpeedModel(
            reference_gpu=str(speed_data.pop("reference_gpu", "rtx4090")),
            seconds_per_image={k: float(v) for k, v in speed_data.pop("seconds_per_image").items()},
            native_resolution={k: int(v) for k, v in speed_data.pop("native_resolution").items()},
            **{k: float(v) for k, v in speed_data.items()},
        )
        scaling_data = dict(data.get("scaling", {}))
        counts = tuple(int(c) for c in scaling_data.pop("gpu_counts", Scaling.gpu_counts))
        typical = tuple(float(e) for e in scaling_data.pop("efficiency", Scaling.efficiency))
        # A catalogue without a band (a copy made before bands existed) gets the typical figure as its band.
        no_band = typical if "efficiency" in data.get("scaling", {}) else None
        low = tuple(float(e) for e in scaling_data.pop("efficiency_low", no_band or Scaling.efficiency_low))
        high = tuple(float(e) for e in scaling_data.pop("efficiency_high", no_band or Scaling.efficiency_high))
        scaling = Scaling(gpu_counts=counts, efficiency=typical, efficiency_low=low, efficiency_high=high,
                          **{k: float(v) for k, v in scaling_data.items()})
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogueError(f"{source}: [speed] or [scaling] is incomplete or has an unknown key: {exc}") from None
    band = (scaling.efficiency, scaling.efficiency_low, scaling.efficiency_high)
    if any(len(scaling.gpu_counts) != len(figures) for figures in band) or \
            list(scaling.gpu_counts) != sorted(scaling.gpu_counts):
        raise CatalogueError(f"{source}: [scaling] gpu_counts must be ascending and as long as efficiency, "
                             "efficiency_low and efficiency_high")
    if any(not lo <= mid <= hi for mid, lo, hi in zip(*band, strict=True)):
        raise CatalogueError(f"{source}: [scaling] each efficiency must lie between efficiency_low and "
                             "efficiency_high")
    halves = set(speed.seconds_per_image) ^ set(speed.native_resolution)
    if halves:
        raise CatalogueError(f"{source}: [speed] gives seconds_per_image and native_resolution for different "
                             f"families ({', '.join(sorted(halves))}): give both for each")
    gpus = []
    for number, entry in enumerate(data.get("gpu", []), start=1):
        try:
            values = dict(entry)
            values["measured"] = {k: float(v) for k, v in dict(values.get("measured", {})).items()}
            gpu = GpuType(**values)
        except TypeError as exc:
            raise CatalogueError(f"{source}: [[gpu]] entry {number} ({entry.get('id', '?')}): {exc}") from None
        if gpu.throughput <= 0 or gpu.vram_gb <= 0 or gpu.price_min > gpu.price_max:
            raise CatalogueError(
                f"{source}: [[gpu]] {gpu.id}: throughput and vram_gb must be positive and "
                "price_min at most price_max"
            )
        gpus.append(gpu)
    if not gpus:
        raise CatalogueError(f"{source}: no [[gpu]] entries")
    return Catalogue(
        gpus=tuple(gpus),
        scaling=scaling,
        speed=speed,
        prices_noted=str(data.get("prices_noted", "unknown date")),
        currency=str(data.get("currency", "USD")),
        source=source,
    )
