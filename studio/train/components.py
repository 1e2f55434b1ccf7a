"""What a family loads: the network trained and what feeds it; shared by the families and the pipeline writers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from studio.core.models.tokenizer_files import MIN_TOKENS
from studio.train.errors import TrainError


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


def check_tokenizers(tokenizers: list[Any], base: str) -> None:
    """Refuse a loaded tokenizer of almost no tokens: its folder lost its vocabulary (transformers then builds
    one of its special tokens alone), and every caption would train as an empty prompt."""
    for tokenizer in tokenizers:
        if tokenizer is None:
            continue
        count = len(tokenizer)
        if count < MIN_TOKENS:
            where = str(getattr(tokenizer, "name_or_path", "") or base)
            raise TrainError(
                "model", f"the tokenizer {where} of {base} knows {count} tokens only: its vocabulary file is missing "
                "or empty, so every caption would train as an empty prompt",
                "copy the tokenizer folder's tokenizer.json (or vocab.json and merges.txt) from the model's "
                "download, or download the model again", path=where)
