"""Host-to-GPU copies that do not stall the step.

A copy from ordinary (pageable) host memory makes the CPU wait until the GPU has
finished everything queued before it; a copy from pinned memory is queued like a
kernel, so the CPU goes on preparing the next step while the GPU computes. Torch's
pinned-memory allocator keeps a pinned block until the copy that reads it is done.
"""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`tensor` on `device` (and in `dtype`); from the CPU to a GPU through pinned memory, asynchronously."""
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device, dtype) if dtype is not None else tensor.to(device)
    if not tensor.is_pinned():
        tensor = tensor.pin_memory()
    moved = tensor.to(device, non_blocking=True)
    # The cast runs on the GPU: casting on the host first would make a pageable copy again.
    return moved.to(dtype) if dtype is not None else moved
