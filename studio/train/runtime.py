"""The Accelerator of a run (GPU, or CPU with gloo when no GPU exists) and the stop signal."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from studio.core.config.rules.pickled import is_pickle_file, pickle_warning
from studio.core.config.schema import TrainConfig
from studio.core.config.weight_dtype import resolved_weight_dtype
from studio.core.runs.events import RunFinished
from studio.core.runs.folders import LAUNCHED_ENV, STOP_FILE

# How long a rank waits for the others at a collective call. Rank 0 alone renders the class images and the
# samples, writes the outputs and fills a disk cache of latents while the other ranks wait at a barrier: the
# GPUs' default of 10 minutes ended a healthy run of several GPUs there (a hundred class images take longer).
RANKS_WAIT = timedelta(hours=3)


def use_cpu(config: TrainConfig) -> bool:
    return config.launch.cpu or not torch.cuda.is_available()


def effective_mixed_precision(config: TrainConfig) -> str:
    """fp16 autocast needs a GPU; a CPU run falls back to full precision."""
    wanted = config.training.mixed_precision
    return "no" if wanted == "fp16" and use_cpu(config) else wanted


def make_accelerator(config: TrainConfig) -> Any:
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    if config.launch.strategy == "fsdp":
        # The trainer shards the modules itself (studio/train/memory/sharding.py says why); accelerate's own
        # FSDP mode, switched on by the accelerate.yaml's fsdp fields, would expect to do it in prepare().
        os.environ.pop("ACCELERATE_USE_FSDP", None)
    group: dict[str, Any] = {"timeout": RANKS_WAIT}
    if sys.platform == "win32" and not use_cpu(config) and int(os.environ.get("LOCAL_RANK", -1)) != -1:
        # PyTorch for Windows has no NCCL, which accelerate asks for on GPUs: the ranks of a workstation with
        # several cards would fail as they start. They join over gloo instead.
        group["backend"] = "gloo"
    handlers: list[Any] = [DistributedDataParallelKwargs(find_unused_parameters=False), InitProcessGroupKwargs(**group)]
    # Without cpu=True on a machine with no GPU, `accelerate launch --multi_gpu` would start
    # unconnected processes that each train on all the data; with it they join a gloo group.
    return Accelerator(
        cpu=use_cpu(config),
        mixed_precision=effective_mixed_precision(config),
        kwargs_handlers=handlers,
    )


def weight_dtype(config: TrainConfig, accelerator: Any) -> torch.dtype:
    """Precision of the frozen weights: the config's dtype on a GPU ("auto": the mixed precision's), fp32 on the CPU."""
    if accelerator.device.type == "cpu":
        return torch.float32
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[resolved_weight_dtype(config)]


def dtype_mismatch(config: TrainConfig) -> str | None:
    """A warning when the frozen weights' dtype differs from what mixed precision computes in (GPU runs)."""
    frozen, precision = resolved_weight_dtype(config), config.training.mixed_precision
    if frozen == "fp32" or frozen == precision:
        return None
    if precision == "no":
        return (f"model.dtype = {frozen} with training.mixed_precision = \"no\": {frozen} frozen weights meet "
                "fp32 activations; set model.dtype = \"auto\" (fp32 here) or turn mixed precision on")
    return (f"model.dtype = {frozen} under {precision} mixed precision: autocast keeps a {precision} copy of "
            f"every frozen weight; set model.dtype = \"auto\" ({precision}) to save that memory")


class StopSignal:
    """STOP file, SIGTERM or SIGINT on any rank makes every rank stop at the same step (the ranks
    agree on it when they read back their losses together, see step_meter).

    `studio-train run` forwards both signals to the trainer's process group, so a job
    scheduler's SIGTERM or a Ctrl+C in the terminal ends with a checkpoint. A second
    SIGINT interrupts at once.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / STOP_FILE
        self.terminated = False
        self.received: str = ""
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in self.SIGNALS:
            try:
                self._previous[signum] = signal.signal(signum, self._on_signal)
            except ValueError:  # not the main thread (tests driving the loop from a thread)
                return

    def uninstall(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.terminated:
            raise KeyboardInterrupt
        self.terminated = True
        self.received = signal.Signals(signum).name

    def clear_stale(self) -> None:
        """A resumed run: the STOP file the leg before stopped at goes. One written since the launch stays: Stop
        pressed while the trainer imports and loads (tens of seconds) was lost, and the run trained on to its end."""
        try:
            if self.path.stat().st_mtime >= float(os.environ[LAUNCHED_ENV]):
                return
        except (OSError, KeyError, ValueError):  # no STOP, or a launch that does not say when (a bundle's)
            pass
        self.path.unlink(missing_ok=True)

    def local(self) -> bool:
        return self.terminated or self.path.exists()

    def reason(self) -> str:
        if self.terminated:
            return f"{self.received} received"
        return f"stopped on request (the Stop button, or a {STOP_FILE} file in the run folder)"

    @contextlib.contextmanager
    def during_setup(self, reporter: Any, processes: int, run_dir: Path, resume: bool) -> Iterator[None]:
        """A Stop asked while the trainer loads, caches or makes class images ends the run at its next phase
        event (one process: ranks stop together at a step), not at a step minutes of set-up later."""
        def check(phase: str) -> None:
            if self.local():
                raise StoppedBeforeTraining(run_dir, resume, phase)

        reporter.after_phase = check if processes == 1 else None
        try:
            yield
        finally:
            reporter.after_phase = None


class StoppedBeforeTraining(Exception):
    """The run stopped during its set-up: nothing trained in this leg, the checkpoints are as they were."""

    def __init__(self, run_dir: Path, resume: bool, phase: str) -> None:
        from studio.train.saving.checkpoints import latest_checkpoint

        latest = latest_checkpoint(run_dir) if resume else None
        self.step = latest[0] if latest is not None else 0
        before = "training resumed (its checkpoints are as they were)" if resume else "the first step"
        super().__init__(f"stopped on request during {phase.replace('_', ' ')}, before {before}")
        self.finished = RunFinished(status="stopped", step=self.step, message=str(self))


def emulated_bf16(config: TrainConfig, device: torch.device) -> str | None:
    """A warning when bf16 is asked of an NVIDIA GPU without bf16 arithmetic (compute capability below 8.0: the
    GTX 10 and RTX 20 series, T4, V100): torch runs it anyway, emulated in fp32, slower than fp16 and often
    than fp32 itself, and the run was slow without a word."""
    if device.type != "cuda" or torch.version.hip:
        return None
    if config.training.mixed_precision == "bf16":
        key = "training.mixed_precision"
    elif resolved_weight_dtype(config) == "bf16":
        key = "model.dtype"
    else:
        return None
    major, minor = torch.cuda.get_device_capability(device)
    if major >= 8:
        return None
    return (f"{key} = \"bf16\" on the {torch.cuda.get_device_name(device)} (compute capability {major}.{minor}), "
            "which has no bf16 arithmetic: torch emulates it, slower than fp16 and often slower than fp32")


def warn_before_loading(config: TrainConfig, device: torch.device, sharding_warning: str | None,
                        warn: Callable[..., None]) -> None:
    """What the run says before the model loads: precisions the device changes, a sharding set-up with more
    processes than GPUs, pickled model files (allowed by model.allow_pickle), samples asked for without prompts."""
    if config.training.mixed_precision != effective_mixed_precision(config):
        warn("fp16 mixed precision needs a GPU; this CPU run trains in full precision")
    mismatch = None if device.type == "cpu" else dtype_mismatch(config)
    if mismatch:
        warn(mismatch, None, "")
    emulated = emulated_bf16(config, device)
    if emulated:
        warn(emulated, None, "set training.mixed_precision = \"fp16\" and model.dtype = \"auto\" for a model that "
             "trains in fp16 (SD 1.x, SDXL); bf16 runs at full speed from the RTX 30 and A100 generation on")
    if sharding_warning:
        warn(sharding_warning, None, "set launch.num_processes to the GPU count")
    for pickled in (p for p in (config.model.base, config.model.vae) if p and is_pickle_file(p)):
        warn(pickle_warning(pickled), pickled, "")
    sampling = config.sampling
    if sampling.every_n_steps and not sampling.prompts:
        warn(f"sampling.every_n_steps = {sampling.every_n_steps} with no sampling.prompts: this run makes no samples",
             None, "add sample prompts (the Train page's Sample settings), or set every_n_steps to 0")


def gpu_total_mb(device: torch.device) -> int:
    """The training GPU's memory in MiB; 0 on the CPU."""
    if device.type != "cuda":
        return 0
    return int(torch.cuda.get_device_properties(device).total_memory / 2**20)


def all_devices(accelerator: Any) -> list[str]:
    """The device of every rank, gathered (a collective call)."""
    device = accelerator.device
    index = -1 if device.type == "cpu" else (device.index or 0)
    gathered = accelerator.gather(torch.tensor([[index]], device=device)).cpu().flatten().tolist()
    return ["cpu" if i < 0 else f"cuda:{i}" for i in gathered]
