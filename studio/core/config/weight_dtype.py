"""The precision a run's frozen weights have on a GPU (model.dtype, "auto" read from mixed precision)."""

from __future__ import annotations

from studio.core.config.schema import Precision, TrainConfig, WeightDtype


def resolved_weight_dtype(config: TrainConfig) -> WeightDtype:
    """The frozen weights' precision on a GPU: model.dtype, with "auto" following mixed precision.

    Frozen weights in the autocast dtype are used as they are; any other dtype makes
    autocast keep a cast copy of every weight for the backward pass.
    """
    dtype = config.model.dtype
    if dtype != "auto":
        return dtype
    by_precision: dict[Precision, WeightDtype] = {"fp16": "fp16", "bf16": "bf16", "no": "fp32"}
    return by_precision[config.training.mixed_precision]
