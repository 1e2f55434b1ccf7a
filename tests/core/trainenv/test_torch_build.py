"""The torch build follows the NVIDIA driver: newest CUDA build it runs, CPU without a GPU,
PyPI's on macOS, and a driver too old for every build is named with the version that would do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from studio.core.hardware.machine.probe import load_profile
from studio.core.hardware.report import GPUInfo, HardwareReport
from studio.core.trainenv.doctor import machine_findings
from studio.core.trainenv.plan import make_plan
from studio.core.trainenv.tools import EnvTool
from studio.core.trainenv.torch_build import choose_torch_build


def machine(cuda: str | None, driver: str = "999.1") -> HardwareReport:
    return HardwareReport(gpus=[GPUInfo(0, "NVIDIA GeForce RTX 4090", 24564, 24000, driver=driver, cuda=cuda)])


@pytest.mark.parametrize(("cuda", "tag"), [("13.0", "cu130"), ("13.1", "cu130"), ("12.9", "cu128"),
                                           ("12.8", "cu128"), ("12.6", "cu126")])
def test_the_newest_cuda_build_the_driver_supports(cuda: str, tag: str) -> None:
    build = choose_torch_build(machine(cuda), platform="linux")
    assert (build.tag, build.index_url) == (tag, f"https://download.pytorch.org/whl/{tag}")
    assert build.problem is None
    assert f"supports CUDA {cuda}" in build.reason


def card(name: str, cc: str, cuda: str = "13.0") -> GPUInfo:
    return GPUInfo(0, name, 11264, 11000, compute_capability=cc, driver="580.95", cuda=cuda)


@pytest.mark.parametrize(("gpus", "tag"), [
    # PyTorch's CUDA 12.8 and 13.0 builds have no kernels before Turing: a GTX 1080 Ti would pass the
    # install's check (CUDA available) and fail at the first kernel of its first training.
    ([card("NVIDIA GeForce GTX 1080 Ti", "6.1")], "cu126"),
    ([card("Tesla V100-PCIE-16GB", "7.0", cuda="12.8")], "cu126"),
    ([card("NVIDIA GeForce RTX 2080 Ti", "7.5")], "cu130"),
    ([card("NVIDIA GeForce RTX 4090", "8.9"), card("NVIDIA GeForce GTX 1080", "6.1")], "cu126"),
])
def test_the_build_has_kernels_for_every_gpu_of_the_machine(gpus: list[GPUInfo], tag: str) -> None:
    build = choose_torch_build(HardwareReport(gpus=gpus), platform="win32")
    assert build.tag == tag and build.problem is None
    if tag == "cu126":
        assert "the newer builds have no kernels for compute capability" in build.reason


def test_a_gpu_older_than_every_build_gets_the_cpu_build_and_says_why() -> None:
    build = choose_torch_build(HardwareReport(gpus=[card("NVIDIA GeForce GTX 780", "3.5", cuda="12.8")]),
                               platform="linux")
    assert build.tag == "cpu" and build.problem is None
    assert "compute capability 3.5" in build.reason and "very slow" in build.reason


def test_no_nvidia_gpu_gets_the_cpu_build_and_macos_pypis(tmp_path: Path) -> None:
    no_gpu = load_profile("no-gpu")
    cpu = choose_torch_build(no_gpu, platform="linux")
    assert (cpu.tag, cpu.index_url) == ("cpu", "https://download.pytorch.org/whl/cpu")
    assert "very slow" in cpu.reason
    mac = choose_torch_build(no_gpu, platform="darwin")
    assert (mac.tag, mac.index_url) == ("default", None)
    # The trainer's GPU is CUDA's: on a Mac it trains on the CPU, and the window says so.
    assert "MPS" not in mac.reason and "training runs on the CPU" in mac.reason
    found = machine_findings(no_gpu, mac, tmp_path, installed=True, platform="darwin")
    assert [(f.code, f.severity) for f in found] == [("no_cuda_on_macos", "warning")]
    assert "the trainer runs on the CPU" in found[0].message


def test_a_driver_too_old_for_every_build_names_the_driver_that_would_do() -> None:
    # The RTX 4090 profile has driver 550.54.14, which supports CUDA 12.4.
    report = load_profile("rtx4090-24gb")
    linux = choose_torch_build(report, platform="linux")
    assert linux.problem is not None
    assert "550.54.14 supports CUDA 12.4" in linux.problem
    assert "update the NVIDIA driver to 560.28 or newer" in linux.problem
    assert "560.76 or newer" in str(choose_torch_build(report, platform="win32").problem)


def test_a_build_chosen_by_hand_wins_and_an_unknown_one_is_refused() -> None:
    assert choose_torch_build(load_profile("rtx4090-24gb"), tag="cpu").problem is None
    with pytest.raises(ValueError, match="unknown torch build 'cu999': choose one of cu130, cu128, cu126, cpu"):
        choose_torch_build(machine("12.8"), tag="cu999")


def test_the_torch_step_reads_pytorchs_index_and_pypi_and_an_offline_install_only_its_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no index of this machine's pip
    plan = make_plan(tmp_path / "env", "venv", None, None, machine("12.8"))
    assert plan.source_args(torch_step=True) == ["--index-url", "https://download.pytorch.org/whl/cu128",
                                                 "--extra-index-url", "https://pypi.org/simple"]
    assert plan.source_args(torch_step=False) == []
    uv = type(plan)(plan.folder, EnvTool("uv", "/bin/uv", "3.11"), plan.build, plan.packages, None, plan.studio_source)
    assert uv.source_args(torch_step=True)[-2:] == ["--index-strategy", "unsafe-best-match"]
    offline = make_plan(tmp_path / "env", "venv", None, tmp_path, machine("12.8"))
    assert offline.source_args(torch_step=True) == ["--no-index", "--find-links", str(tmp_path)]
