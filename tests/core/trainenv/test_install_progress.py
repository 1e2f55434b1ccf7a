"""pip's and uv's output become progress a person can read: step, package, bytes."""

from __future__ import annotations

from studio.core.trainenv.progress import InstallProgress, OutputReader


def feed(lines: list[str]) -> list[InstallProgress]:
    reader = OutputReader(InstallProgress("torch", 2, 5))
    return [reader.feed(line + "\n") for line in lines]


def test_pip_downloads_add_up_per_package() -> None:
    states = feed([
        "Looking in indexes: https://download.pytorch.org/whl/cu128",
        "Collecting torch==2.13.0",
        "  Downloading https://download.pytorch.org/whl/cu128/torch-2.13.0%2Bcu128-cp311-cp311-manylinux_2_28_x86_64.whl (850.2 MB)",
        "Collecting nvidia-cudnn-cu12==9.10.2.21 (from torch==2.13.0)",
        "  Downloading nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl (706.8 MB)",
        "Installing collected packages: nvidia-cudnn-cu12, torch",
    ])
    assert [s.package for s in states] == [None, "torch", "torch", "nvidia-cudnn-cu12", "nvidia-cudnn-cu12",
                                           "nvidia-cudnn-cu12"]
    assert states[2].bytes_total == 850_200_000 and states[2].bytes_done == 0
    assert states[4].bytes_total == 850_200_000 + 706_800_000 and states[4].bytes_done == 850_200_000
    assert states[-1].bytes_done == states[-1].bytes_total
    assert states[4].describe() == "step 2 of 5: torch, nvidia-cudnn-cu12, 850.2 of 1557.0 MB"


def test_pip_raw_progress_counts_bytes_within_a_download() -> None:
    states = feed(["  Downloading torch-2.13.0-cp311-cp311-win_amd64.whl (200.0 MB)", "Progress 50000000 of 200000000",
                   "Progress 200000000 of 200000000"])
    assert [s.bytes_done for s in states] == [0, 50_000_000, 200_000_000]
    assert states[-1].package == "torch"


def test_uv_downloads_and_local_wheels() -> None:
    states = feed(["Resolved 30 packages in 1.20s", "Downloading torch (812.4MiB)", " Downloaded torch",
                   "Processing /wheels/nvidia_ml_py-13.615.71-py3-none-any.whl"])
    assert states[1].package == "torch" and states[1].bytes_total == int(812.4 * 2**20)
    assert states[2].bytes_done == states[1].bytes_total
    assert states[3].package == "nvidia-ml-py"
