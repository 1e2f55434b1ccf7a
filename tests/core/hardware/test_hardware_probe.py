"""The hardware probe: fake profiles, a machine without NVML, and nvidia-smi output."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from studio.core.estimate.estimate import other_processes_warning
from studio.core.hardware.machine import probes as hardware_probes
from studio.core.hardware.machine.probe import list_profiles, load_hardware, probe_hardware
from studio.core.hardware.report import HardwareProfileError

EXPECTED = {
    "rtx4060-8gb": (1, 8188),
    "rtx3060-12gb": (1, 12288),
    "rtx4060ti-16gb": (1, 16380),
    "rtx4090-24gb": (1, 24564),
    "2x-rtx3090": (2, 24576),
    "a100-80gb": (1, 81920),
    "8x-h100-80gb": (8, 81559),
    "no-gpu": (0, 0),
}

# Captured from `nvidia-smi --query-gpu=index,name,memory.total,memory.free,memory.used,driver_version,uuid,compute_cap
# --format=csv,noheader,nounits` on a two-GPU workstation.
SMI_SAMPLE = (
    "0, NVIDIA GeForce RTX 3090, 24576, 23912, 402, 550.54.14, GPU-0a1b2c3d-0000-1111-2222-333344445555, 8.6\n"
    "1, NVIDIA GeForce RTX 3090, 24576, 24253, 18, 550.54.14, GPU-0a1b2c3d-0000-1111-2222-333344446666, 8.6\n"
)
SMI_BANNER = "| NVIDIA-SMI 550.54.14    Driver Version: 550.54.14    CUDA Version: 12.4     |"


def test_every_shipped_profile_is_listed() -> None:
    assert set(EXPECTED) <= set(list_profiles())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_by_name(name: str) -> None:
    report = load_hardware(name)
    count, total = EXPECTED[name]
    assert len(report.gpus) == count
    assert report.source == f"profile:{name}"
    if count:
        assert report.gpus[0].total_mb == total
        assert report.gpus[0].bf16 is True
        assert 0 < report.gpus[0].free_mb <= total
    assert report.ram_mb > 0 and report.cores > 0


def test_profile_from_env_and_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STUDIO_HARDWARE", "2x-rtx3090")
    report = load_hardware()
    assert [g.nvlink for g in report.gpus] == [[1], [0]]
    custom = tmp_path / "mine.json"
    custom.write_text(json.dumps({"gpus": [{"index": 0, "name": "Test GPU", "total_mb": 16384}]}))
    report = load_hardware(str(custom))
    assert report.gpus[0].free_mb == 16384 and report.profile == "mine"


def test_eight_h100_see_each_other() -> None:
    gpus = load_hardware("8x-h100-80gb").gpus
    assert all(len(g.p2p) == 7 and len(g.nvlink) == 7 for g in gpus)


def test_bad_profiles_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(HardwareProfileError, match="rtx4090-24gb"):
        load_hardware("rtx9999")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(HardwareProfileError, match="not valid JSON at line 1"):
        load_hardware(bad)
    bad.write_text(json.dumps({"gpus": [{"index": 0, "name": "x", "total_mb": 1, "vram": 2}]}))
    with pytest.raises(HardwareProfileError, match="unknown GPU keys \\['vram'\\]"):
        load_hardware(bad)


def test_no_nvml_gives_a_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    fake.NVMLError = NVMLError  # type: ignore[attr-defined]
    fake.nvmlInit = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(hardware_probes.shutil, "which", lambda name: None)
    report = probe_hardware(tmp_path / "not-yet-made")
    assert report.gpus == [] and report.source == "none"
    assert report.notes[0].startswith("No GPU found")
    assert any("no NVIDIA GPU found through NVML: NVML Shared Library Not Found" in n for n in report.notes)
    assert any("nvidia-smi not found" in n for n in report.notes)
    assert report.disk_free_mb is not None and report.disk_path == str(tmp_path)


def test_nvml_package_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    gpus, _, note = hardware_probes.probe_nvml(load_hardware("no-gpu"))
    assert gpus == [] and note is not None and "nvidia-ml-py" in note


def test_nvidia_smi_output_is_parsed() -> None:
    gpus = hardware_probes.parse_nvidia_smi_csv(SMI_SAMPLE)
    assert [(g.index, g.name, g.total_mb, g.free_mb, g.used_mb) for g in gpus] == [
        (0, "NVIDIA GeForce RTX 3090", 24576, 23912, 402),
        (1, "NVIDIA GeForce RTX 3090", 24576, 24253, 18),
    ]
    assert gpus[0].compute_capability == "8.6" and gpus[0].bf16 is True and gpus[0].driver == "550.54.14"
    assert hardware_probes.parse_cuda_version(SMI_BANNER) == "12.4"
    old = hardware_probes.parse_nvidia_smi_csv("0, Tesla T4, 15360, 15000, 360, 470.1, GPU-x, [N/A]\n")
    assert old[0].compute_capability is None and old[0].bf16 is None


# `nvidia-smi --query-gpu=index,name,memory.total,memory.free,memory.used,driver_version,uuid,compute_cap
# --format=csv,noheader,nounits` where the driver withholds fields: memory in a container, the driver
# version in WSL2.
SMI_WITHHELD = (
    "0, NVIDIA GeForce RTX 4090, 24564, 22010, [N/A], 550.54.14, GPU-9a2f6c1e-5b7d-4e0f-8c3a-1d2e3f4a5b6c, 8.9\n"
    "1, NVIDIA GeForce RTX 3060, 12288, [Insufficient Permissions], 1024, [N/A], [N/A], 8.6\n"
    "2, Tesla T4, 15360, [N/A], [N/A], [Not Supported], GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0, [N/A]\n"
)


def test_withheld_nvidia_smi_fields_are_unknown_not_zero() -> None:
    gpus = hardware_probes.parse_nvidia_smi_csv(SMI_WITHHELD)
    # Free memory comes from the other memory field, or the whole card when neither is given: never 0 (full).
    assert [(g.total_mb, g.free_mb, g.used_mb) for g in gpus] == [
        (24564, 22010, 2554), (12288, 11264, 1024), (15360, 15360, 0)]
    assert [(g.driver, g.uuid) for g in gpus] == [
        ("550.54.14", "GPU-9a2f6c1e-5b7d-4e0f-8c3a-1d2e3f4a5b6c"), (None, None),
        (None, "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")]
    assert other_processes_warning(gpus[2]) is None


def test_nvidia_smi_probe_runs_the_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def run(cmd: list[str], **kwargs: object) -> types.SimpleNamespace:
        calls.append(cmd)
        out = SMI_SAMPLE if len(cmd) > 1 else SMI_BANNER
        return types.SimpleNamespace(returncode=0, stdout=out, stderr="")

    monkeypatch.setattr(hardware_probes.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(hardware_probes.subprocess, "run", run)
    gpus, source, note = hardware_probes.probe_nvidia_smi(load_hardware("no-gpu"))
    assert source == "nvidia-smi" and note is None
    assert len(gpus) == 2 and gpus[1].cuda == "12.4"
    assert "--format=csv,noheader,nounits" in calls[0]


@pytest.mark.skipif(sys.platform == "win32", reason="the fake nvidia-smi is a shell script")
def test_a_gpu_name_in_another_code_page_does_not_end_the_probe(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A driver that writes the GPU's name in a Windows ANSI code page (cp1252 "ü" is the byte 0xFC).
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\n"
                    "printf '0, NVIDIA RTX A4000 B\\374ro, 16376, 15800, 576, 551.23, GPU-1a2b, 8.6\\n'\n")
    tool.chmod(0o755)
    monkeypatch.setattr(hardware_probes.shutil, "which", lambda name: str(tool))
    gpus, _, note = hardware_probes.probe_nvidia_smi(load_hardware("no-gpu"))
    assert note is None and [(g.name, g.total_mb, g.free_mb) for g in gpus] == [
        ("NVIDIA RTX A4000 B\ufffdro", 16376, 15800)]


def test_rocm_smi_json_is_parsed() -> None:
    sample = json.dumps({"card0": {"Card series": "Radeon RX 7900 XTX", "VRAM Total Memory (B)": "25753026560",
                                   "VRAM Total Used Memory (B)": "1073741824"}})
    gpus = hardware_probes.parse_rocm_smi_json(sample)
    assert gpus[0].vendor == "amd" and gpus[0].name == "Radeon RX 7900 XTX"
    assert gpus[0].total_mb == 24560 and gpus[0].used_mb == 1024


def test_report_round_trips_through_json() -> None:
    report = load_hardware("2x-rtx3090")
    again = type(report).from_dict(json.loads(report.to_json()))
    assert again.gpus == report.gpus and again.summary() == "2x NVIDIA GeForce RTX 3090 24 GB"


def test_the_torch_probe_numbers_the_gpus_as_nvidia_smi_does(monkeypatch: pytest.MonkeyPatch) -> None:
    # Torch's GPU i is merged into the report's GPU i: both must count in PCI bus order.
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.setattr(hardware_probes, "_TORCH_SCRIPT",
                        "import json, os; print('STUDIO_TORCH_PROBE ' + json.dumps("
                        "{'torch': os.environ.get('CUDA_DEVICE_ORDER'), 'gpus': []}))")
    info, note = hardware_probes.run_torch_probe(sys.executable)
    assert note is None and info is not None and info["torch"] == "PCI_BUS_ID"


# An RTX 3060 in the first slot and a 4090 in the second, as nvidia-smi lists them.
SMI_TWO_CARDS = (
    "0, NVIDIA GeForce RTX 3060, 12288, 11780, 508, 560.35.03, GPU-3b0e8d1a-77c2-4f19-a8e5-0c6d2f1b9a44, 8.6\n"
    "1, NVIDIA GeForce RTX 4090, 24564, 24077, 487, 560.35.03, GPU-9a2f6c1e-5b7d-4e0f-8c3a-1d2e3f4a5b6c, 8.9\n"
)


@pytest.mark.parametrize("visible", ["1", "GPU-9a2f6c1e", "1,7"])
def test_cuda_visible_devices_leaves_the_gpus_a_training_sees(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, visible: str) -> None:
    def run(cmd: list[str], **kwargs: object) -> types.SimpleNamespace:
        return types.SimpleNamespace(returncode=0, stdout=SMI_TWO_CARDS if len(cmd) > 1 else SMI_BANNER, stderr="")

    monkeypatch.setattr(hardware_probes, "probe_nvml", lambda report: ([], "nvml", None))
    monkeypatch.setattr(hardware_probes.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(hardware_probes.subprocess, "run", run)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    report = probe_hardware(tmp_path)
    # The trainer's only GPU is the 4090, still called GPU 1 as nvidia-smi and launch.gpu_ids call it.
    assert [(g.index, g.name) for g in report.gpus] == [(1, "NVIDIA GeForce RTX 4090")]
    assert any("sees 1 of the 2 GPUs (GPU 1)" in n for n in report.notes)
    # Torch, under the same variable, calls it GPU 0: its facts land on the 4090.
    monkeypatch.setattr(hardware_probes, "run_torch_probe", lambda python=None: (
        {"torch": "2.8.0", "cuda": "12.8", "gpus": [
            {"index": 0, "name": "NVIDIA GeForce RTX 4090", "total_mb": 24564, "free_mb": 24077, "cc": "8.9",
             "bf16": True}]}, None))
    hardware_probes.apply_torch_probe(report)
    assert [(g.index, g.name, g.bf16) for g in report.gpus] == [(1, "NVIDIA GeForce RTX 4090", True)]


def test_no_visible_cuda_device_means_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = hardware_probes.parse_nvidia_smi_csv(SMI_TWO_CARDS)
    assert hardware_probes.cuda_visible(gpus, "-1")[0] == []
    assert hardware_probes.cuda_visible(gpus, "1,0")[0] == [gpus[1], gpus[0]]
    assert hardware_probes.cuda_visible(gpus, "0,1") == (gpus, None)


FAKE_TORCH = '''
import types
__version__ = "2.8.0"
version = types.SimpleNamespace(cuda="12.8", hip=None)
backends = types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: False))
_CARDS = [("NVIDIA GeForce RTX 3090", 8, 6), ("Tesla T4", 7, 5)]


def _props(i):
    name, major, minor = _CARDS[i]
    return types.SimpleNamespace(name=name, major=major, minor=minor, total_memory=16 * 2**30)


# As torch answers: the first GPU is asked, and a card that can hold a bf16 tensor says yes (emulated).
cuda = types.SimpleNamespace(
    is_available=lambda: True, device_count=lambda: len(_CARDS), get_device_properties=_props,
    mem_get_info=lambda i: (15 * 2**30, 16 * 2**30), current_device=lambda: 0,
    is_bf16_supported=lambda including_emulation=True: True)
'''


def test_bf16_is_each_cards_own_and_not_an_emulated_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An RTX 3090 beside a T4: torch's own question answered for the first card and yes to an emulated bf16,
    and the Hardware page showed bf16 for the T4, where bf16 runs several times slower than fp16."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    info, note = hardware_probes.run_torch_probe(sys.executable)
    assert note is None and info is not None
    assert [(g["name"], g["cc"], g["bf16"]) for g in info["gpus"]] == [
        ("NVIDIA GeForce RTX 3090", "8.6", True), ("Tesla T4", "7.5", False)]
