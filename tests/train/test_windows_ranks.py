"""A workstation with several GPUs on Windows, whose PyTorch has no NCCL: its ranks join over gloo.

Windows is simulated (the platform as runtime.py reads it, a CUDA device, a rank of a multi-GPU
launch); the Accelerator is a stand-in that records how it was asked to join the ranks.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

from studio.core.config.schema import TrainConfig
from studio.train import runtime


class _Windows:
    platform = "win32"

    def __getattr__(self, attribute: str) -> Any:
        return getattr(sys, attribute)


class _Accelerator:
    def __init__(self, **options: Any) -> None:
        self.options = options


def _group(accelerator: _Accelerator) -> dict[str, Any]:
    """What the ranks' process group is asked for beyond accelerate's own choices."""
    from accelerate.utils import InitProcessGroupKwargs

    [handler] = [h for h in accelerator.options["kwargs_handlers"] if isinstance(h, InitProcessGroupKwargs)]
    return dict(handler.to_kwargs())


def _backends(accelerator: _Accelerator) -> list[str]:
    backend = _group(accelerator).get("backend")
    return [backend] if backend else []


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_the_gpu_ranks_of_a_windows_workstation_join_over_gloo(monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    import accelerate

    monkeypatch.setattr(accelerate, "Accelerator", _Accelerator)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")  # a rank of `accelerate launch --multi_gpu`
    if platform == "win32":
        monkeypatch.setattr(runtime, "sys", _Windows())
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"},
                                         "launch": {"num_processes": 2}})
    accelerator = runtime.make_accelerator(config)
    assert _backends(accelerator) == (["gloo"] if platform == "win32" else [])  # NCCL elsewhere, accelerate's choice
    monkeypatch.delenv("LOCAL_RANK")
    assert _backends(runtime.make_accelerator(config)) == []  # one process: no group to join


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_ranks_wait_for_rank_zero_longer_than_the_ten_minutes_of_nccl(monkeypatch: pytest.MonkeyPatch,
                                                                      platform: str) -> None:
    """Rank 0 alone renders class images and samples and writes the outputs while the other ranks wait at a
    barrier; on GPUs the process group's default would end the run after 10 minutes of that."""
    from datetime import timedelta

    import accelerate

    monkeypatch.setattr(accelerate, "Accelerator", _Accelerator)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    if platform == "win32":
        monkeypatch.setattr(runtime, "sys", _Windows())
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"},
                                         "launch": {"num_processes": 2}})
    assert _group(runtime.make_accelerator(config))["timeout"] >= timedelta(hours=1)
