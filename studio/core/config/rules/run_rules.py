"""Consistency rules of a whole run (see schema.CONSISTENCY_RULES): training lengths and buckets, settings that
act for the family and method, and the frozen base stored in fewer bits (fp8, or model.quantized_base).

Each raises a `Contradiction` naming the key, its value and what to do.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.errors import Contradiction
from studio.core.config.rules.acting import inert_settings
from studio.core.config.rules.quantized_rules import check_quantized_base
from studio.core.families import family

# A TrainConfig (schema.py imports these rules, so they do not import it).
TrainConfig = Any


def check_training(config: TrainConfig) -> None:
    t, d = config.training, config.dataset
    if t.checkpointing_interval > 1 and not t.gradient_checkpointing:
        raise Contradiction(
            "training.checkpointing_interval", t.checkpointing_interval,
            "only applies with training.gradient_checkpointing = true (it says which blocks recompute); "
            "turn gradient checkpointing on, or set the interval back to 1",
        )
    if t.optimizer == "prodigy" and t.text_encoder_lr is not None and t.text_encoder_lr != t.learning_rate:
        # Prodigy finds one step size for every trained weight: its first step failed with a traceback.
        raise Contradiction(
            "training.text_encoder_lr", t.text_encoder_lr,
            f"differs from training.learning_rate ({t.learning_rate:g}), and training.optimizer = \"prodigy\" "
            "takes one learning rate for all the trained weights; leave text_encoder_lr empty, or choose another "
            "optimizer",
        )
    if d.min_bucket > d.max_bucket:
        raise Contradiction(
            "dataset.min_bucket", d.min_bucket, f"must not exceed dataset.max_bucket ({d.max_bucket})"
        )
    if config.output.save_every_n_epochs and config.method.kind != "lora":
        raise Contradiction("output.save_every_n_epochs", config.output.save_every_n_epochs,
                             "applies to LoRA runs; a DreamBooth run would write a whole model each time "
                             "(use output.save_every_n_steps checkpoints and resume instead)")


def check_settings_act(config: TrainConfig) -> None:
    """A setting changed from its default that does not act (another family's or method's, or one that
    needs another setting) is refused: the run would train something other than what the file says."""
    spec = family(config.model.family)
    if config.method.kind not in spec.methods:
        raise Contradiction("method.kind", config.method.kind,
                            f"the studio trains {spec.title} with {' or '.join(spec.methods)} only")
    if config.method.train_text_encoder and not spec.trains_text_encoders:
        raise Contradiction("method.train_text_encoder", True,
                            f"{spec.title}'s text encoder stays frozen (its embeddings are cached); leave it off")
    for key, value, why in inert_settings(config):
        raise Contradiction(key, value, why)


def check_frozen_base(config: TrainConfig) -> None:
    """model.fp8_base and model.quantized_base store the frozen base in fewer bits: only under a LoRA."""
    check_quantized_base(config)
    if config.model.fp8_base and config.method.kind != "lora":
        raise Contradiction("model.fp8_base", True,
                            "applies to LoRA runs; a full fine-tune (dreambooth) trains the very weights fp8 "
                            "would store, so turn one of them off")
    if config.model.fp8_base and config.method.use_dora:
        raise Contradiction("model.fp8_base", True,
                            "cannot be combined with method.use_dora = true: DoRA computes with the base "
                            "weights themselves, which fp8 stores in 8 bits; turn one of them off")
