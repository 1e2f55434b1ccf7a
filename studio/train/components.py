"""What a family loads: the network trained and what feeds it; shared by the families and the pipeline writers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Components:
    """What a family loads: the network trained (UNet or transformer) and what feeds it."""

    denoiser: torch.nn.Module
    vae: torch.nn.Module
    text_encoders: list[torch.nn.Module]
    tokenizers: list[Any]
    scheduler: Any  # the training noise scheduler
    sample_scheduler: Any = None  # the scheduler the pipeline samples with
    extras: dict[str, Any] = field(default_factory=dict)
