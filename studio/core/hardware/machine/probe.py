"""What the machine has: GPUs, CPU, RAM, disk; probed, or read from a fake profile.

`load_hardware()` is the one entry point: it reads the profile named by
`STUDIO_HARDWARE` (or the argument), else probes this machine. Probing never
raises: each part that cannot be read adds a note saying why.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from studio.core.hardware.machine import probes
from studio.core.hardware.report import HardwareProfileError, HardwareReport
from studio.core.resources import resource_path

ENV_VAR = "STUDIO_HARDWARE"
PROFILE_DIR = ("hardware",)


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


def probe_hardware(disk_path: str | Path | None = None, use_torch: bool = False) -> HardwareReport:
    """Read this machine. Never raises; what cannot be read is explained in `notes`."""
    report = HardwareReport()
    probes.fill_host(report, Path(disk_path) if disk_path else Path.cwd())
    for probe in (probes.probe_nvml, probes.probe_nvidia_smi, probes.probe_rocm, probes.probe_mps):
        gpus, source, note = probe(report)
        if note:
            report.notes.append(note)
        if gpus:
            report.gpus, report.source = gpus, source
            break
    if report.source in ("nvml", "nvidia-smi") and os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        report.gpus, note = probes.cuda_visible(report.gpus, os.environ["CUDA_VISIBLE_DEVICES"])
        if note:
            report.notes.append(note)
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
