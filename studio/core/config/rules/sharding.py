"""What `launch.strategy = "fsdp"` shards: for each family, the blocks that become FSDP units.

A unit's weights are gathered whole for its forward and again for its backward, then
freed; what lies outside every unit (embeddings, the first and last layers) is the root
unit, gathered for the whole step. The trainer wraps these classes
(`studio/train/memory/sharding.py`), the estimate reads the size of the largest unit
(`resources/architectures/<family>.json`, "fsdp"), and the run's accelerate.yaml names them.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.schema import TrainConfig
from studio.core.families import FAMILIES, family

# Each family declares its units (FamilySpec.fsdp_units): for a UNet the resnet and transformer blocks,
# the attention models holding the latter (their projections), and the down/up samplers: SDXL's
# 1280-channel upsampler alone is 15 M parameters.
DENOISER_UNITS: dict[str, tuple[str, ...]] = {spec.name: spec.fsdp_units for spec in FAMILIES}
TEXT_ENCODER_UNITS = ("CLIPEncoderLayer",)
# The blocks recomputed in the backward when training.gradient_checkpointing is on (FSDP's
# checkpoint wrapper around each; checkpointing_interval N keeps every N-th).
CHECKPOINTED_BLOCKS = tuple(dict.fromkeys(
    [block for spec in FAMILIES for block in spec.checkpointed_blocks] + ["CLIPEncoderLayer"]))


def sharded(config: TrainConfig) -> bool:
    """Whether the run's trained weights are split across its processes."""
    return config.launch.strategy == "fsdp" and config.launch.num_processes > 1


def unit_classes(config: TrainConfig) -> tuple[str, ...]:
    """The module classes wrapped as units in this run (the text encoders' layers when they train)."""
    units = family(config.model.family).fsdp_units
    return units + TEXT_ENCODER_UNITS if config.method.train_text_encoder else units


def accelerate_fsdp_config(config: TrainConfig) -> dict[str, Any]:
    """accelerate's `fsdp_config` table for the run: FSDP2, full shard, one unit per block, sharded checkpoints."""
    return {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": True,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": ",".join(unit_classes(config)),
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_activation_checkpointing": config.training.gradient_checkpointing,
        "fsdp_offload_params": False,
        "fsdp_cpu_ram_efficient_loading": False,
    }
