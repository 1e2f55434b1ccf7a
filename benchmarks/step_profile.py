"""What one training step costs the host: the aten ops it dispatches and, on a GPU, the kernels it launches.

A host-bound step (batch 1 as slow as batch 4) is one that launches more kernels than the GPU needs
time to run; this count is what a CUDA graph or fewer ops per LoRA layer would lower. One step is
run under `torch.profiler` and its events are counted: `aten::` ops on the host, kernels on the
device (copies and fills apart), the runtime's launch calls (`cudaLaunchKernel` and the like, one
`cudaGraphLaunch` for a whole captured graph) and the host's waits for the device
(`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaMemcpy` without Async). On the CPU only the
ops are counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                "cudaLaunchCooperativeKernel", "cudaGraphLaunch")
HOST_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


@dataclass(frozen=True)
class StepProfile:
    ops: int  # aten ops dispatched on the host (nested ones included)
    kernels: int | None  # device kernels (None on the CPU)
    launches: int | None  # the runtime's launch calls
    host_waits: int | None  # the host's waits for the device inside the step


def count_events(names_and_devices: list[tuple[str, str]]) -> StepProfile:
    """The counts from (event name, "cpu" or "cuda") pairs of one profiled step."""
    ops = sum(1 for name, device in names_and_devices if device == "cpu" and name.startswith("aten::"))
    if not any(device == "cuda" for _name, device in names_and_devices):
        return StepProfile(ops, None, None, None)
    kernels = sum(1 for name, device in names_and_devices
                  if device == "cuda" and not name.startswith(("Memcpy", "Memset")))
    launches = sum(1 for name, device in names_and_devices if device == "cpu" and name in LAUNCH_CALLS)
    waits = sum(1 for name, device in names_and_devices if device == "cpu" and name in HOST_WAITS)
    return StepProfile(ops, kernels, launches, waits)


def profile_step(step: Callable[[], Any], device: str) -> StepProfile:
    """Run `step` once under the profiler (after the device has finished earlier work) and count its events."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        step()
        if device == "cuda":
            torch.cuda.synchronize()  # the step's kernels are in the trace when the profile closes
    pairs = [(event.name, "cuda" if event.device_type == torch.autograd.DeviceType.CUDA else "cpu")
        for event in prof.events()]
    counted = count_events(pairs)
    if counted.host_waits is None:
        return counted
    # The synchronize that closes the profile is the benchmark's, not the step's.
    return StepProfile(counted.ops, counted.kernels, counted.launches, max(0, counted.host_waits - 1))
