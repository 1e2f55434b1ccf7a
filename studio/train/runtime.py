"""The Accelerator of a run (GPU, or CPU with gloo when no GPU exists) and the stop signal."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from studio.core.config import TrainConfig
from studio.core.runs import STOP_FILE


def use_cpu(config: TrainConfig) -> bool:
    return config.launch.cpu or not torch.cuda.is_available()


def effective_mixed_precision(config: TrainConfig) -> str:
    """fp16 autocast needs a GPU; a CPU run falls back to full precision."""
    wanted = config.training.mixed_precision
    return "no" if wanted == "fp16" and use_cpu(config) else wanted


def make_accelerator(config: TrainConfig) -> Any:
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    # Without cpu=True on a machine with no GPU, `accelerate launch --multi_gpu` would start
    # unconnected processes that each train on all the data; with it they join a gloo group.
    return Accelerator(
        cpu=use_cpu(config),
        mixed_precision=effective_mixed_precision(config),
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=False)],
    )


def weight_dtype(config: TrainConfig, accelerator: Any) -> torch.dtype:
    """Precision of the frozen weights: the config's dtype on a GPU, fp32 on the CPU."""
    if accelerator.device.type == "cpu":
        return torch.float32
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[config.model.dtype]


class StopSignal:
    """STOP file or SIGTERM on any rank makes every rank stop at the same step."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / STOP_FILE
        self.terminated = False
        self._previous: Any = None

    def install(self) -> None:
        try:
            self._previous = signal.signal(signal.SIGTERM, self._on_term)
        except ValueError:  # not the main thread (tests driving the loop from a thread)
            self._previous = None

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.terminated = True

    def local(self) -> bool:
        return self.terminated or self.path.exists()

    def agreed(self, accelerator: Any) -> bool:
        """True on every rank when any rank wants to stop (a collective call)."""
        flag = torch.tensor([1.0 if self.local() else 0.0], device=accelerator.device)
        if accelerator.num_processes > 1:
            flag = accelerator.reduce(flag, reduction="sum")
        return bool(flag.item() > 0)

    def reason(self) -> str:
        return "SIGTERM received" if self.terminated else f"{STOP_FILE} file found"
