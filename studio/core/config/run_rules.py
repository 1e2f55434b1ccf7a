"""The rules between a run's settings: caches, training, fp8, families and methods, sharding, launch, pickles.

Each raises a `Contradiction` naming the key, its value and what to do; schema.py runs them in order
and reports the first one found.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.acting import inert_settings
from studio.core.config.errors import Contradiction
from studio.core.config.pickled import is_pickle_file, pickle_refusal
from studio.core.families import family

# A TrainConfig (schema.py imports these rules, so they do not import it).
TrainConfig = Any


def check_caches(config: TrainConfig) -> None:
    """A cache holds what every step would otherwise compute; nothing may change it between steps."""
    t, d = config.training, config.dataset
    if t.cache_text_embeddings and config.method.train_text_encoder:
        raise Contradiction(
            "training.cache_text_embeddings",
            True,
            "cached text embeddings cannot be used while method.train_text_encoder = true "
            "(the encoder changes every step); turn one of them off",
        )
    if t.cache_text_embeddings and d.shuffle_tags:
        raise Contradiction(
            "training.cache_text_embeddings",
            True,
            "cached text embeddings cannot follow dataset.shuffle_tags = true "
            "(each step has a different caption); turn one of them off",
        )
    if config.model.text_encoder_on_cpu and not t.cache_text_embeddings:
        raise Contradiction(
            "model.text_encoder_on_cpu",
            True,
            "text encoders on the CPU need training.cache_text_embeddings = true (each step would otherwise "
            "encode its captions on the CPU); turn cache_text_embeddings on or this off",
        )
    # Dropout to the empty caption is cheap to cache too: caption_dropout is allowed with the cache.
    if t.cache_latents and (d.flip or d.crop == "random"):
        raise Contradiction(
            "training.cache_latents",
            True,
            "cached latents cannot follow dataset.flip or dataset.crop = \"random\" "
            "(each epoch sees a different image); turn the augmentation or the cache off",
        )
    if t.cache_latents_to_disk and not t.cache_latents:
        raise Contradiction(
            "training.cache_latents_to_disk", True, "needs training.cache_latents = true"
        )


def check_training(config: TrainConfig) -> None:
    t, d = config.training, config.dataset
    if t.checkpointing_interval > 1 and not t.gradient_checkpointing:
        raise Contradiction(
            "training.checkpointing_interval", t.checkpointing_interval,
            "only applies with training.gradient_checkpointing = true (it says which blocks recompute); "
            "turn gradient checkpointing on, or set the interval back to 1",
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


def check_fp8(config: TrainConfig) -> None:
    if config.model.fp8_base and config.method.kind != "lora":
        raise Contradiction("model.fp8_base", True,
                            "applies to LoRA runs; a full fine-tune (dreambooth) trains the very weights fp8 "
                            "would store, so turn one of them off")
    if config.model.fp8_base and config.method.use_dora:
        raise Contradiction("model.fp8_base", True,
                            "cannot be combined with method.use_dora = true: DoRA computes with the base "
                            "weights themselves, which fp8 stores in 8 bits; turn one of them off")


def check_strategy(config: TrainConfig) -> None:
    """What sharding cannot do, named with the reason (one process is allowed: the trainer warns)."""
    if config.launch.strategy != "fsdp":
        return
    if config.method.kind == "lora":
        raise Contradiction("launch.strategy", "fsdp",
                            "shards the weights a full fine-tune trains; a LoRA's trained weights are a few "
                            "megabytes, and the frozen base is not sharded. Use strategy \"ddp\" for LoRA "
                            "(or method.kind = \"dreambooth\")")
    if config.training.mixed_precision == "fp16":
        raise Contradiction("launch.strategy", "fsdp",
                            "is not available with training.mixed_precision = \"fp16\" (sharded gradients "
                            "would need a sharded loss scaler); use \"bf16\" (every GPU since the RTX 30 and "
                            "A100 series has it) or \"no\"")
    if config.training.compile != "off":
        raise Contradiction("training.compile", config.training.compile,
                            "is not available with launch.strategy = \"fsdp\" (sharding wraps the very blocks the "
                            "compiler would compile, and the pair is untested); set training.compile = \"off\"")


def check_launch(config: TrainConfig) -> None:
    launch = config.launch
    if launch.machine_rank >= launch.num_machines:
        raise Contradiction(
            "launch.machine_rank",
            launch.machine_rank,
            f"must be below launch.num_machines ({launch.num_machines})",
        )
    if launch.num_processes < launch.num_machines:
        raise Contradiction(
            "launch.num_processes",
            launch.num_processes,
            f"must be at least launch.num_machines ({launch.num_machines})",
        )


def check_pickle(config: TrainConfig) -> None:
    """A pickle model file can run code when loaded: refused unless the config allows it explicitly."""
    model = config.model
    for key, value in (("model.base", model.base), ("model.vae", model.vae),
                       ("model.training_adapter", model.training_adapter)):
        if value and is_pickle_file(value) and not model.allow_pickle:
            raise Contradiction(key, value, pickle_refusal(value))
