"""Frozen modules the steps never use wait off the GPU until samples or class images need them.

With cached latents the VAE is used only to decode samples; with cached text
embeddings the frozen text encoders only encode sample prompts. Keeping them in
system memory between those moments is what the studio's VRAM estimate assumes
(SDXL: ~1.5 GB, SD3 with T5: ~9 GB).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class FrozenOffload:
    """Named frozen modules parked on `offload_device`, brought to `device` inside `resident()`."""

    def __init__(self, device: torch.device, offload_device: torch.device | None = None) -> None:
        self.device = device
        self.offload_device = offload_device or torch.device("cpu")
        self.modules: dict[str, torch.nn.Module] = {}
        self.away = False

    def add(self, name: str, module: torch.nn.Module) -> None:
        self.modules[name] = module

    def offload(self) -> None:
        """Move every module off the training device and give its memory back to the driver."""
        if not self.modules:
            return
        for module in self.modules.values():
            module.to(self.offload_device)
        self.away = True
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @contextlib.contextmanager
    def resident(self) -> Iterator[None]:
        """The modules on the training device for the duration of the block, then off again."""
        if not self.away:
            yield
            return
        for module in self.modules.values():
            module.to(self.device)
        self.away = False
        try:
            yield
        finally:
            self.offload()
