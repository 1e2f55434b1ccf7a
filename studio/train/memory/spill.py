"""Windows' silent spill of GPU memory into shared system memory, named while the run goes on.

On Windows, NVIDIA's driver (536.40 and later) lends a CUDA program shared system memory once the
card is full ("CUDA - Sysmem Fallback Policy"), instead of failing the allocation. The run does not
stop with an out-of-memory error the studio could offer a fix for: its steps get several times slower
(15 s where they took 2 s), and people take it for a slow trainer. Linux has no such fallback: there
an allocation past the card fails.

The watch reads what the step events already carry (every rank's reserved memory, the images per
second over the recent steps; no extra read from the GPU) beside each card's total memory read once at
the start. When a rank holds more than its card has, the trainer warns once, naming the memory, the
slowdown since the fastest steps of the run, and the driver setting that turns the spill into an
out-of-memory error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from studio.core.runs.events import Step

# Reserved memory the allocator holds is at most the card's memory less the CUDA context when nothing
# spills; past this share of the card's total, the driver has lent shared memory.
OVER_CARD = 1.0
SLOWER = 1.5  # a slowdown worth naming: the step rate under this share of the run's best
DRIVER_SETTING = ("NVIDIA Control Panel > Manage 3D settings > CUDA - Sysmem Fallback Policy > "
                  "Prefer No Sysmem Fallback")


@dataclass
class SpillWatch:
    """Watch the step events of a run on cards of `total_mb` (by device name, e.g. "cuda:0")."""

    total_mb: dict[str, float]
    names: dict[str, str] = field(default_factory=dict)  # the card's name, for the message
    best_rate: float = 0.0
    warned: bool = False

    def check(self, steps: Iterable[Step]) -> tuple[str, str] | None:
        """The warning to give for these step events, once a run: (what happens, what to do); or None."""
        message = None
        for step in steps:
            rate = step.samples_per_s
            over = [(m.device, m.reserved_mb) for m in step.memory
                    if m.reserved_mb is not None and m.device in self.total_mb
                    and m.reserved_mb > OVER_CARD * self.total_mb[m.device]]
            if over and not self.warned:
                self.warned = True
                message = self._message(over[0][0], over[0][1], rate)
            if not over:  # the run's own speed, before any spill
                self.best_rate = max(self.best_rate, rate)
        return message

    def _message(self, device: str, reserved_mb: float, rate: float) -> tuple[str, str]:
        total = self.total_mb[device]
        card = f"{device} ({self.names[device]})" if device in self.names else device
        slower = ""
        if self.best_rate > 0 and rate > 0 and self.best_rate / rate >= SLOWER:
            slower = (f"; steps are {self.best_rate / rate:.1f}x slower than earlier in this run "
                      f"({self.best_rate:.2f} -> {rate:.2f} images/s)")
        return (f"the trainer holds {reserved_mb / 1024:.1f} GB on {card}, which has {total / 1024:.1f} GB: "
                f"Windows' driver is lending it shared system memory{slower}; training goes on, far slower",
                "lower the batch size or the resolution, or turn on gradient checkpointing or a lower-memory "
                "preset; to have such a run stop with an out-of-memory message (and the studio's fixes) "
                f"instead, set {DRIVER_SETTING}")


def watch_cards(device: object) -> SpillWatch | None:
    """A watch for this machine's CUDA cards (every rank's device is one of them), or None off CUDA."""
    import torch

    if getattr(device, "type", None) != "cuda":
        return None
    cards = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    return SpillWatch({f"cuda:{i}": c.total_memory / 2**20 for i, c in enumerate(cards)},
                      {f"cuda:{i}": c.name for i, c in enumerate(cards)})
