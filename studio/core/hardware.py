"""What the machine has: GPUs, CPU, RAM, disk; probed, or read from a fake profile.

`load_hardware()` is the one entry point: it reads the profile named by
`STUDIO_HARDWARE` (or the argument), else probes this machine. Probing never
raises: each part that cannot be read adds a note saying why.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from studio.core.resources import resource_path

ENV_VAR = "STUDIO_HARDWARE"
PROFILE_DIR = ("hardware",)


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

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def total_vram_mb(self) -> int:
        return sum(g.total_mb for g in self.gpus)

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

    def summary(self) -> str:
        """One line for a status bar or a log."""
        if not self.gpus:
            return f"No GPU — {self.cpu_model}, {self.cores} cores, {self.ram_mb / 1024:.0f} GB RAM"
        names: dict[str, int] = {}
        for g in self.gpus:
            names[f"{g.name} {g.total_gb:.0f} GB"] = names.get(f"{g.name} {g.total_gb:.0f} GB", 0) + 1
        return ", ".join(f"{n}x {k}" if n > 1 else k for k, n in names.items())


class HardwareProfileError(ValueError):
    """A fake hardware profile that cannot be read; the message says which and why."""


# ---------------------------------------------------------------- profiles


def profile_dir() -> Path:
    return resource_path(*PROFILE_DIR)


def list_profiles() -> list[str]:
    """Names of the shipped fake profiles (file names without .json)."""
    folder = profile_dir()
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def find_profile(path_or_name: str | Path) -> Path:
    """A profile file from a path or a bare shipped name like `rtx4090-24gb`."""
    candidate = Path(path_or_name).expanduser()
    if candidate.is_file():
        return candidate
    name = str(path_or_name)
    shipped = profile_dir() / (name if name.endswith(".json") else f"{name}.json")
    if shipped.is_file():
        return shipped
    raise HardwareProfileError(
        f"hardware profile '{path_or_name}' not found: not a file, and not one of the shipped "
        f"profiles ({', '.join(list_profiles()) or 'none'}); give a JSON file path or one of those names"
    )


def load_profile(path_or_name: str | Path) -> HardwareReport:
    path = find_profile(path_or_name)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise HardwareProfileError(f"{path}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise HardwareProfileError(f"{path}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise HardwareProfileError(f"{path}: must hold a JSON object")
    try:
        report = HardwareReport.from_dict(data, source=f"profile:{path.stem}")
    except HardwareProfileError as exc:
        raise HardwareProfileError(f"{path}: {exc}") from None
    report.source = f"profile:{path.stem}"
    report.profile = path.stem
    return report


# ---------------------------------------------------------------- probe


def probe_hardware(disk_path: str | Path | None = None, use_torch: bool = False) -> HardwareReport:
    """Read this machine. Never raises; what cannot be read is explained in `notes`."""
    from studio.core import hardware_probes as probes

    report = HardwareReport()
    probes.fill_host(report, Path(disk_path) if disk_path else Path.cwd())
    for probe in (probes.probe_nvml, probes.probe_nvidia_smi, probes.probe_rocm, probes.probe_mps):
        gpus, source, note = probe(report)
        if note:
            report.notes.append(note)
        if gpus:
            report.gpus, report.source = gpus, source
            break
    if use_torch:
        probes.apply_torch_probe(report)
    if not report.gpus:
        report.notes.insert(0, "No GPU found: training would run on the CPU (very slow); "
                               "choose a hardware profile to plan a run for another machine.")
    return report


def load_hardware(path_or_name: str | Path | None = None, disk_path: str | Path | None = None,
                  use_torch: bool = False) -> HardwareReport:
    """The profile named by the argument or $STUDIO_HARDWARE, else a probe of this machine.

    Raises HardwareProfileError only for a named profile that cannot be read.
    """
    chosen = path_or_name or os.environ.get(ENV_VAR) or None
    if chosen:
        return load_profile(chosen)
    return probe_hardware(disk_path, use_torch=use_torch)
