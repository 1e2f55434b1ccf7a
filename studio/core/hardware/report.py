"""What a machine has, as data: its GPUs and host, read from a probe or a hardware profile."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from studio.core.config.schema import LaunchSection


class HardwareProfileError(ValueError):
    """A fake hardware profile that cannot be read; the message says which and why."""


@dataclass
class GPUInfo:
    index: int
    name: str
    total_mb: int
    free_mb: int
    used_mb: int = 0
    vendor: str = "nvidia"  # nvidia | amd | apple
    compute_capability: str | None = None  # "8.6"
    bf16: bool | None = None
    driver: str | None = None
    cuda: str | None = None
    uuid: str | None = None
    # Indices of the GPUs this one reaches peer-to-peer, and over NVLink.
    p2p: list[int] = field(default_factory=list)
    nvlink: list[int] = field(default_factory=list)
    # VRAM held by other processes (other programs, a desktop, another training).
    other_processes_mb: int = 0
    # Apple silicon shares its memory with the CPU.
    unified_memory: bool = False

    @property
    def total_gb(self) -> float:
        return self.total_mb / 1024

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPUInfo:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HardwareProfileError(f"unknown GPU keys {unknown}; known keys: {sorted(known)}")
        for key in ("index", "name", "total_mb"):
            if key not in data:
                raise HardwareProfileError(f"a GPU entry lacks '{key}'")
        values = dict(data)
        values.setdefault("free_mb", values["total_mb"] - values.get("used_mb", 0))
        return cls(**values)


@dataclass
class HardwareReport:
    gpus: list[GPUInfo] = field(default_factory=list)
    cpu_model: str = "unknown CPU"
    cores: int = 1  # logical
    physical_cores: int | None = None
    ram_mb: int = 0
    ram_available_mb: int | None = None
    disk_free_mb: int | None = None
    disk_path: str | None = None
    os: str = ""
    torch: str | None = None  # version seen by the torch probe
    # Why a part is missing or approximate ("no NVIDIA GPU found: ...").
    notes: list[str] = field(default_factory=list)
    # Where the GPU facts came from: nvml, nvidia-smi, rocm-smi, mps, torch, none, or profile:NAME.
    source: str = "none"
    profile: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "profile") -> HardwareReport:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"description"})
        if unknown:
            raise HardwareProfileError(f"unknown keys {unknown}; known keys: {sorted(known)}")
        values = {k: v for k, v in data.items() if k in known}
        gpus = values.pop("gpus", [])
        if not isinstance(gpus, list):
            raise HardwareProfileError("'gpus' must be a list of GPU tables")
        try:
            report = cls(**values, gpus=[GPUInfo.from_dict(g) for g in gpus])
        except TypeError as exc:
            raise HardwareProfileError(f"bad value: {exc}") from None
        if "source" not in data:
            report.source = source
        return report

    def training_gpus(self, gpu_ids: str = "all", processes: int | None = None) -> list[GPUInfo]:
        """The GPUs a run trains on here: those launch.gpu_ids names, numbered as the studio shows them (the
        trainer's CUDA numbers them so too), and of those the first `processes` (one process a GPU). A number
        the machine lacks names none."""
        if gpu_ids.strip() in ("", "all"):
            chosen = list(self.gpus)
        else:
            by_index = {g.index: g for g in self.gpus}
            wanted = [int(part) for part in gpu_ids.split(",") if part.strip().isdigit()]
            chosen = [by_index[i] for i in dict.fromkeys(wanted) if i in by_index]
        return chosen[:processes] if processes else chosen

    def training_gpu(self, gpu_ids: str = "all", processes: int | None = None) -> GPUInfo | None:
        """The card a run's estimate is held against: of the GPUs it trains on, the one with the least memory
        to give (every process holds what it trains whole). A machine's first GPU for a one-GPU run on any."""
        chosen = self.training_gpus(gpu_ids, processes)
        return min(chosen, key=lambda g: g.total_mb - g.other_processes_mb) if chosen else None

    def run_gpus(self, launch: LaunchSection) -> tuple[GPUInfo | None, int]:
        """(the card a run's estimate is held against, how many GPUs it may use) for a run of these launch
        settings on this machine: those launch.gpu_ids chooses, not the machine's first (a 3060 beside the
        chosen 4090)."""
        here = -(-launch.num_processes // launch.num_machines)  # the processes each machine starts
        return self.training_gpu(launch.gpu_ids, here), len(self.training_gpus(launch.gpu_ids))

    def summary(self) -> str:
        """One line for a status bar or a log."""
        if not self.gpus:
            return f"No GPU — {self.cpu_model}, {self.cores} cores, {self.ram_mb / 1024:.0f} GB RAM"
        names: dict[str, int] = {}
        for g in self.gpus:
            names[f"{g.name} {g.total_gb:.0f} GB"] = names.get(f"{g.name} {g.total_gb:.0f} GB", 0) + 1
        return ", ".join(f"{n}x {k}" if n > 1 else k for k, n in names.items())
