"""Which build of torch this machine needs, from its NVIDIA driver (read through NVML).

The newest CUDA build the driver can run (NVML reports the newest CUDA version the driver
supports) that has kernels for every NVIDIA GPU of the machine (a GTX 10-series card gets
the CUDA 12.6 build); the CPU build when there is no NVIDIA GPU; PyPI's own build on macOS (the
trainer runs on the CPU there: it trains on NVIDIA GPUs through CUDA). A driver older than every CUDA build is named, with the driver version that
would do.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from studio.core.hardware.report import HardwareReport
from studio.core.trainenv.packages import torch_builds_table

CPU = "cpu"
DEFAULT = "default"  # PyPI's build (macOS)


@dataclass(frozen=True)
class TorchBuild:
    tag: str  # cu128, cpu, default
    index_url: str | None  # None: PyPI
    reason: str  # why this build, in words
    problem: str | None = None  # set when the driver cannot run any CUDA build
    disk_gb: float = 4.0

    @property
    def cuda(self) -> bool:
        return self.tag.startswith("cu")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def nvidia_driver(report: HardwareReport) -> tuple[str | None, str | None, list[str]]:
    """(driver version, newest CUDA version it supports, NVIDIA GPU names) from a hardware report."""
    nvidia = [gpu for gpu in report.gpus if gpu.vendor == "nvidia"]
    driver = next((gpu.driver for gpu in nvidia if gpu.driver), None)
    cuda = next((gpu.cuda for gpu in nvidia if gpu.cuda), None)
    return driver, cuda, [gpu.name for gpu in nvidia]


def oldest_capability(report: HardwareReport) -> str | None:
    """The lowest compute capability among the NVIDIA GPUs ("6.1"), None when none reported one."""
    known = [gpu.compute_capability for gpu in report.gpus if gpu.vendor == "nvidia" and gpu.compute_capability]
    return min(known, key=_version) if known else None


def available_tags() -> list[str]:
    table = torch_builds_table()
    return [entry["tag"] for entry in table.get("cuda", [])] + [CPU, DEFAULT]


def choose_torch_build(report: HardwareReport, platform: str = sys.platform, tag: str | None = None) -> TorchBuild:
    """The build for this machine, or the one named by `tag` (cu128, cpu, default)."""
    table = torch_builds_table()
    index, disk = table["index"], table.get("disk_gb", {})
    builds = table.get("cuda", [])
    if tag:
        if tag not in available_tags():
            raise ValueError(f"unknown torch build '{tag}': choose one of {', '.join(available_tags())}")
        url = None if tag == DEFAULT else f"{index}/{tag}"
        kind = "cuda" if tag.startswith("cu") else tag
        return TorchBuild(tag, url, f"chosen by hand ({tag})", disk_gb=float(disk.get(kind, 4)))
    if platform == "darwin":
        # The trainer's GPU is CUDA's (train/runtime.py); on a Mac it trains on the CPU, not the Apple GPU.
        return TorchBuild(DEFAULT, None, "macOS: PyPI's build; training runs on the CPU here (the studio trains on "
                          "NVIDIA GPUs, through CUDA), so it is very slow", disk_gb=float(disk.get("default", 4)))
    driver, cuda, names = nvidia_driver(report)
    if not names:
        return TorchBuild(CPU, f"{index}/{CPU}", "no NVIDIA GPU found: the CPU build (training is very slow)",
                          disk_gb=float(disk.get("cpu", 4)))
    gpus = ", ".join(sorted(set(names)))
    if cuda is None:
        problem = (f"the NVIDIA driver of {gpus} did not say which CUDA version it supports; "
                   "update the driver, or choose a build by hand (--torch)")
        return TorchBuild(CPU, f"{index}/{CPU}", "the driver's CUDA version is unknown", problem,
                          disk_gb=float(disk.get("cpu", 4)))
    runnable = [build for build in builds if _version(cuda) >= _version(build["cuda"])]
    oldest_cc = oldest_capability(report)
    for build in runnable:
        # A build without kernels for the card imports and says CUDA is available, then fails at the first
        # kernel ("no kernel image is available for execution on the device").
        if oldest_cc is None or _version(oldest_cc) >= _version(build.get("min_cc", "0")):
            older = "" if build is runnable[0] else \
                f" (the newer builds have no kernels for compute capability {oldest_cc})"
            return TorchBuild(build["tag"], f"{index}/{build['tag']}",
                              f"{gpus}, driver {driver or '?'} supports CUDA {cuda}: the CUDA {build['cuda']} "
                              f"build{older}", disk_gb=float(disk.get("cuda", 12)))
    if runnable:
        return TorchBuild(CPU, f"{index}/{CPU}",
                          f"{gpus} (compute capability {oldest_cc}) is older than any GPU the CUDA builds of the studio's "
                          "PyTorch have kernels for: the CPU build (training is very slow)", disk_gb=float(disk.get("cpu", 4)))
    oldest = builds[-1]
    key = "driver_windows" if platform.startswith("win") else "driver_linux"
    problem = (f"the NVIDIA driver {driver or '?'} supports CUDA {cuda}, older than every build of the "
               f"studio's PyTorch (the oldest needs CUDA {oldest['cuda']}): update the NVIDIA driver to "
               f"{oldest[key]} or newer, then run the install again")
    return TorchBuild(oldest["tag"], f"{index}/{oldest['tag']}", f"driver {driver} is too old", problem,
                      disk_gb=float(disk.get("cuda", 12)))
