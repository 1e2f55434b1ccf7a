"""The rules of the adapter's kind (LyCORIS networks) and of the trained weights' moving average (EMA).

Each raises a `Contradiction` naming the key, its value and what to do, as schema's other rules do.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.errors import Contradiction
from studio.core.families import family

# A TrainConfig (schema.py imports these rules, so they do not import it).
TrainConfig = Any


def check_network(config: TrainConfig) -> None:
    method = config.method
    if method.kind != "lora":
        return
    spec = family(config.model.family)
    has_convolutions = spec.setting("method.conv_rank") is not None
    if method.network == "locon" and not has_convolutions:
        raise Contradiction("method.network", "locon",
                            f"adds the LoRA to the convolution layers, and {spec.title}'s transformer has none "
                            "to adapt; use \"lora\" (or \"loha\" or \"lokr\")")
    if method.use_dora and method.network in ("loha", "lokr"):
        kind = {"loha": "LoHa", "lokr": "LoKr"}[method.network]
        raise Contradiction("method.use_dora", True,
                            f"works with method.network = \"lora\" or \"locon\" only (a {kind} has no DoRA form): "
                            "turn method.use_dora off, or choose one of those networks")
    convolutions = method.network == "locon" or method.conv_rank is not None
    if method.conv_alpha is not None and not convolutions:
        raise Contradiction("method.conv_alpha", method.conv_alpha,
                            f"scales the adapter on the convolution layers, which a {method.network} without "
                            "method.conv_rank leaves out; set method.conv_rank too, or leave conv_alpha empty")


def check_ema(config: TrainConfig) -> None:
    training = config.training
    if not training.ema:
        return
    if config.launch.strategy == "fsdp":
        raise Contradiction("training.ema", True,
                            "is not available with launch.strategy = \"fsdp\" yet (the average would have to be "
                            "sharded like the weights); use strategy \"ddp\", or turn training.ema off")
    if training.ema_for_samples and not config.sampling.every_n_steps:
        raise Contradiction("training.ema_for_samples", True,
                            "makes the samples with the EMA weights, and this run makes no samples "
                            "(sampling.every_n_steps = 0); set sampling.every_n_steps, or leave it off")
