"""Frozen modules the steps never use wait off the GPU until samples or class images need them.

With cached latents the VAE is used only to decode samples; with cached text
embeddings the frozen text encoders only encode sample prompts. Keeping them in
system memory between those moments is what the studio's VRAM estimate assumes
(SDXL: ~1.5 GB, SD3 with T5: ~9 GB). Samples bring them back one kind at a time
(the encoders for the prompts, then the VAE for the decode), so the sampling peak
is the largest of them, not their sum.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch


class FrozenOffload:
    """Named frozen modules parked on `offload_device`, brought to `device` inside `resident()`."""

    def __init__(self, device: torch.device, offload_device: torch.device | None = None) -> None:
        self.device = device
        self.offload_device = offload_device or torch.device("cpu")
        self.modules: dict[str, torch.nn.Module] = {}
        self.parked: set[str] = set()

    @property
    def away(self) -> bool:
        """Whether any module is off the training device."""
        return bool(self.parked)

    def add(self, name: str, module: torch.nn.Module) -> None:
        self.modules[name] = module

    def offload(self) -> None:
        """Move every module off the training device and give its memory back to the driver."""
        self._park([name for name in self.modules if name not in self.parked])

    def _park(self, names: list[str]) -> None:
        for name in names:
            self.modules[name].to(self.offload_device)
            self.parked.add(name)
        if names and self.device.type == "cuda":
            torch.cuda.empty_cache()

    @contextlib.contextmanager
    def resident(self, names: Iterable[str] | None = None) -> Iterator[None]:
        """The named modules (default: all) on the training device for the block, then off again.

        Names that were never added are ignored: a module that is not parked is where it works. A module that
        fails to come (the GPU out of memory half-way through a text encoder, which a sample survives) goes
        back with the others: none stays on the GPU beside the training, nor half there for the next sample.
        """
        wanted = self.parked if names is None else self.parked & set(names)
        brought = sorted(wanted)
        try:
            for name in brought:
                self.parked.discard(name)
                self.modules[name].to(self.device)
            yield
        finally:
            self._park(brought)

    def text_encoder_names(self) -> list[str]:
        return [name for name in self.modules if name.startswith("text_encoder")]
