"""The individual probes behind `probe_hardware`; each returns (gpus, source, note) and never raises."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from studio.core.console_window import no_window
from studio.core.hardware.report import GPUInfo, HardwareReport
from studio.core.training_python import NoTrainingPython, default_training_python

ProbeResult = tuple[list[GPUInfo], str, str | None]
MB = 1024 * 1024
SMI_TIMEOUT_S = 10.0
# The tools' output as text: a GPU name in a code page other than the studio's (a Windows driver writes the
# system's ANSI one) shows a replacement character rather than ending the probe with a decoding error.
TOOL_TEXT: dict[str, Any] = {"encoding": "utf-8", "errors": "replace"}
TORCH_TIMEOUT_S = 60.0


def _bf16_from_capability(capability: str | None) -> bool | None:
    """bf16 needs Ampere (compute capability 8.0) or newer."""
    if not capability:
        return None
    try:
        return float(capability) >= 8.0
    except ValueError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------- host


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                 text=True, timeout=SMI_TIMEOUT_S, check=False)
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def fill_host(report: HardwareReport, disk_path: Path) -> None:
    """CPU, RAM and the free disk space where the project lives."""
    import psutil

    report.os = f"{platform.system()} {platform.release()}".strip()
    report.cpu_model = _cpu_model()
    report.cores = psutil.cpu_count(logical=True) or 1
    report.physical_cores = psutil.cpu_count(logical=False)
    try:
        memory = psutil.virtual_memory()
        report.ram_mb, report.ram_available_mb = memory.total // MB, memory.available // MB
    except OSError as exc:
        report.notes.append(f"RAM could not be read: {exc}")
    # The project folder may not exist yet: measure the nearest folder that does.
    existing = disk_path.expanduser().resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        report.disk_free_mb = psutil.disk_usage(str(existing)).free // MB
        report.disk_path = str(existing)
    except OSError as exc:
        report.notes.append(f"free disk space at {existing} could not be read: {exc}")


# ---------------------------------------------------------------- NVIDIA


def probe_nvml(report: HardwareReport) -> ProbeResult:
    try:
        import pynvml
    except ImportError:
        return [], "nvml", "NVML not available: the nvidia-ml-py package is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], "nvml", f"no NVIDIA GPU found through NVML: {exc} (no NVIDIA driver, or it is not loaded)"
    try:
        return _read_nvml(pynvml), "nvml", None
    except pynvml.NVMLError as exc:
        return [], "nvml", f"NVML failed while reading the GPUs: {exc}"
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _nvml_optional(call: Any, *args: Any) -> Any:
    import pynvml

    try:
        return call(*args)
    except (pynvml.NVMLError, AttributeError):
        return None


def _read_nvml(pynvml: Any) -> list[GPUInfo]:
    count = pynvml.nvmlDeviceGetCount()
    driver = _nvml_optional(pynvml.nvmlSystemGetDriverVersion)
    cuda_int = _nvml_optional(pynvml.nvmlSystemGetCudaDriverVersion_v2)
    cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}" if cuda_int else None
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    gpus: list[GPUInfo] = []
    for index, handle in enumerate(handles):
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        capability = _nvml_optional(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
        cc = f"{capability[0]}.{capability[1]}" if capability else None
        processes = _nvml_optional(pynvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
        graphics = _nvml_optional(pynvml.nvmlDeviceGetGraphicsRunningProcesses, handle) or []
        held = sum((p.usedGpuMemory or 0) for p in [*processes, *graphics]) // MB
        p2p, nvlink = [], []
        for other, other_handle in enumerate(handles):
            if other == index:
                continue
            ok = pynvml.NVML_P2P_STATUS_OK
            if _nvml_optional(pynvml.nvmlDeviceGetP2PStatus, handle, other_handle,
                              pynvml.NVML_P2P_CAPS_INDEX_READ) == ok:
                p2p.append(other)
            if _nvml_optional(pynvml.nvmlDeviceGetP2PStatus, handle, other_handle,
                              pynvml.NVML_P2P_CAPS_INDEX_NVLINK) == ok:
                nvlink.append(other)
        gpus.append(GPUInfo(
            index=index, name=_text(pynvml.nvmlDeviceGetName(handle)),
            total_mb=memory.total // MB, free_mb=memory.free // MB, used_mb=memory.used // MB,
            compute_capability=cc, bf16=_bf16_from_capability(cc),
            driver=_text(driver) if driver else None, cuda=cuda,
            uuid=_text(_nvml_optional(pynvml.nvmlDeviceGetUUID, handle) or "") or None,
            p2p=p2p, nvlink=nvlink, other_processes_mb=held,
        ))
    return gpus


SMI_FIELDS = ["index", "name", "memory.total", "memory.free", "memory.used", "driver_version", "uuid",
              "compute_cap"]


def parse_nvidia_smi_csv(text: str, fields: list[str] | None = None) -> list[GPUInfo]:
    """Rows of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`."""
    fields = fields or SMI_FIELDS
    gpus: list[GPUInfo] = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            continue
        # A field the driver cannot give reads "[N/A]", "[Not Supported]" or "[Insufficient Permissions]".
        row = {key: value for key, value in zip(fields, values, strict=True) if value and not value.startswith("[")}

        def number(key: str, row: dict[str, str] = row) -> int | None:
            try:
                return int(float(row[key]))
            except (KeyError, ValueError):
                return None

        total, free, used = number("memory.total") or 0, number("memory.free"), number("memory.used")
        # One memory field missing (memory.used in some containers): the other says it, rather than the
        # card reading as full (free 0) and a warning that other programs hold all of it.
        if free is None:
            free = total - used if used is not None else total
        if used is None:
            used = total - free
        cc = row.get("compute_cap")
        cc = cc if cc and cc[0].isdigit() else None
        gpus.append(GPUInfo(
            index=number("index") or 0, name=row.get("name", "NVIDIA GPU"),
            total_mb=total, free_mb=free, used_mb=used,
            compute_capability=cc, bf16=_bf16_from_capability(cc),
            driver=row.get("driver_version"), uuid=row.get("uuid"),
        ))
    return gpus


def cuda_visible(gpus: list[GPUInfo], value: str) -> tuple[list[GPUInfo], str | None]:
    """The GPUs a training sees under CUDA_VISIBLE_DEVICES=value, in its order (the trainer's GPU 0 first).

    NVML and nvidia-smi list every GPU of the machine whatever the variable says; the trainer inherits it.
    Entries are GPU numbers or (prefixes of) UUIDs; CUDA ignores everything from the first it cannot match.
    """
    seen: list[GPUInfo] = []
    for entry in (part.strip() for part in value.split(",")):
        match = [g for g in gpus if (entry.isdigit() and g.index == int(entry))
                 or (entry.startswith("GPU-") and (g.uuid or "").startswith(entry))]
        if entry.startswith("MIG-"):
            return gpus, (f"CUDA_VISIBLE_DEVICES={value} names a MIG instance: the memory shown is the whole "
                          "GPU's, more than the instance has")
        if len(match) != 1 or match[0] in seen:
            break
        seen.append(match[0])
    if len(seen) == len(gpus):
        return seen, None
    return seen, (f"CUDA_VISIBLE_DEVICES={value}: a training here sees {len(seen)} of the {len(gpus)} GPUs"
                  + (" (" + ", ".join(f"GPU {g.index}" for g in seen) + ")" if seen else "")
                  + "; unset it to use them all")


def parse_cuda_version(smi_banner: str) -> str | None:
    """The 'CUDA Version: 12.4' of plain `nvidia-smi` output."""
    marker = "CUDA Version:"
    if marker not in smi_banner:
        return None
    return smi_banner.split(marker, 1)[1].split()[0].strip("|") or None


def probe_nvidia_smi(report: HardwareReport) -> ProbeResult:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return [], "nvidia-smi", "nvidia-smi not found on PATH"
    fields = list(SMI_FIELDS)
    # Older drivers do not know compute_cap; ask again without it.
    for attempt in range(2):
        try:
            out = subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                                 capture_output=True, timeout=SMI_TIMEOUT_S, check=False,
                                 creationflags=no_window(), **TOOL_TEXT)
        except (OSError, subprocess.SubprocessError) as exc:
            return [], "nvidia-smi", f"nvidia-smi could not run: {exc}"
        if out.returncode == 0:
            break
        if attempt == 0:
            fields.remove("compute_cap")
    else:
        reason = (out.stderr or out.stdout).strip().splitlines()[:1]
        return [], "nvidia-smi", f"nvidia-smi failed: {reason[0] if reason else f'exit code {out.returncode}'}"
    gpus = parse_nvidia_smi_csv(out.stdout, fields)
    try:
        banner = subprocess.run([exe], capture_output=True, timeout=SMI_TIMEOUT_S, check=False,
                                creationflags=no_window(), **TOOL_TEXT).stdout
        cuda = parse_cuda_version(banner)
    except (OSError, subprocess.SubprocessError):
        cuda = None
    for gpu in gpus:
        gpu.cuda = cuda
    return gpus, "nvidia-smi", None if gpus else "nvidia-smi listed no GPU"


# ---------------------------------------------------------------- AMD / Apple


def parse_rocm_smi_json(text: str) -> list[GPUInfo]:
    """Output of `rocm-smi --showproductname --showmeminfo vram --json`."""
    data = json.loads(text)
    gpus: list[GPUInfo] = []
    for key, card in sorted(data.items()):
        if not key.startswith("card") or not isinstance(card, dict):
            continue
        total = int(card.get("VRAM Total Memory (B)", 0)) // MB
        used = int(card.get("VRAM Total Used Memory (B)", 0)) // MB
        name = card.get("Card Series") or card.get("Card series") or card.get("Card model") or "AMD GPU"
        gpus.append(GPUInfo(index=int(key[4:] or 0), name=str(name), total_mb=total, free_mb=total - used,
                            used_mb=used, vendor="amd", bf16=None))
    return gpus


def probe_rocm(report: HardwareReport) -> ProbeResult:
    exe = shutil.which("rocm-smi")
    if exe is None:
        return [], "rocm-smi", None  # Most machines have none; not worth a note.
    try:
        out = subprocess.run([exe, "--showproductname", "--showmeminfo", "vram", "--json"],
                             capture_output=True, timeout=SMI_TIMEOUT_S, check=False, **TOOL_TEXT)
        gpus = parse_rocm_smi_json(out.stdout) if out.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return [], "rocm-smi", f"rocm-smi could not be read: {exc}"
    return gpus, "rocm-smi", None if gpus else "rocm-smi listed no AMD GPU"


def probe_mps(report: HardwareReport) -> ProbeResult:
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return [], "mps", None
    # Apple silicon: the GPU shares the RAM; roughly 70% of it is usable by Metal.
    usable = int(report.ram_mb * 0.7)
    gpu = GPUInfo(index=0, name=f"Apple {report.cpu_model} GPU", total_mb=usable, free_mb=usable,
                  vendor="apple", bf16=None, unified_memory=True)
    return [gpu], "mps", "Apple GPU (MPS): memory is shared with the CPU; estimates are approximate"


# ---------------------------------------------------------------- torch, in a subprocess

# bf16 is each card's own (torch.cuda.is_bf16_supported asks the first GPU only, and says yes to any card that
# can hold a bf16 tensor: a T4 or a GTX 1080, where it is emulated and slow).

_TORCH_SCRIPT = r"""
import json, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": [],
        "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())}
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        info["gpus"].append({"index": i, "name": p.name, "total_mb": total // 2**20, "free_mb": free // 2**20,
                             "cc": f"{p.major}.{p.minor}", "bf16": bool(torch.version.hip) or p.major >= 8})
print("STUDIO_TORCH_PROBE " + json.dumps(info))
"""


def run_torch_probe(python: str | None = None, timeout: float = TORCH_TIMEOUT_S) -> tuple[dict[str, Any] | None, str | None]:
    """Ask torch in a separate interpreter (the studio's process never imports torch)."""
    try:
        # Never sys.executable itself: in the desktop app that is the window's binary, not a Python.
        interpreter = python or default_training_python()
    except NoTrainingPython as exc:
        return None, str(exc)
    try:
        # Torch numbers the GPUs as the trainer does (runs/launch.py's training_env: in PCI bus order, as
        # NVML and nvidia-smi do), so its GPU i is the report's GPU i.
        env = {**os.environ, "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
        out = subprocess.run([interpreter, "-c", _TORCH_SCRIPT], capture_output=True, env=env,
                             text=True, timeout=timeout, check=False, creationflags=no_window())
    except subprocess.TimeoutExpired:
        return None, f"the torch probe took longer than {timeout:.0f} s and was stopped"
    except OSError as exc:
        return None, f"the torch probe could not start: {exc}"
    for line in out.stdout.splitlines():
        if line.startswith("STUDIO_TORCH_PROBE "):
            return json.loads(line.split(" ", 1)[1]), None
    last = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return None, f"the torch probe failed: {last}"


def apply_torch_probe(report: HardwareReport, python: str | None = None) -> None:
    info, note = run_torch_probe(python)
    if info is None:
        report.notes.append(note or "the torch probe failed")
        return
    report.torch = info.get("torch")
    # Torch's GPU i is the report's i-th (both in PCI bus order, both under CUDA_VISIBLE_DEVICES), whose
    # number may be another (the machine's GPU 1 when only it is visible).
    for row in info.get("gpus", []):
        gpu = report.gpus[row["index"]] if row["index"] < len(report.gpus) else None
        if gpu is None:
            gpu = GPUInfo(index=row["index"], name=row["name"], total_mb=row["total_mb"], free_mb=row["free_mb"])
            report.gpus.append(gpu)
            report.source = report.source if report.source != "none" else "torch"
        gpu.bf16 = row.get("bf16", gpu.bf16)
        gpu.compute_capability = gpu.compute_capability or row.get("cc")
        gpu.cuda = gpu.cuda or info.get("cuda")
    if report.gpus and not info.get("gpus") and report.gpus[0].vendor == "nvidia":
        report.notes.append(f"torch {report.torch} does not see the GPU (a CPU-only build?); "
                            "install a CUDA build of torch in the training environment")
