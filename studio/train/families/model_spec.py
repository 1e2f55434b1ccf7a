"""What a shared model file says about itself: the model-spec fields (modelspec.*) and kohya's ss_* keys.

The model-spec list is Stability AI's, as kohya's sd-scripts fills it (library/sai_model_spec.py):
its MUST fields are the spec version, architecture, implementation, title and resolution. The
ss_* keys are sd-scripts' (train_network.py), which A1111/Forge's LoRA cards and model sites read:
the training date, output name, image folders with their counts, tag frequencies. Files are meant
to be shared, so folders appear by name only, never by path.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from studio import __version__
from studio.core.config.schema import TrainConfig
from studio.core.dataset.captions.caption_tags import tag_counts
from studio.core.families import family
from studio.core.families.spec import STABILITY_AI, Prediction

MODEL_SPEC_VERSION = "1.0.1"
TAGS_KEPT = 500


class Image(Protocol):
    """What the metadata needs of a training image (the trainer's TrainItem)."""

    path: Path
    caption: str
    repeats: int
    is_class: bool


def model_spec(config: TrainConfig, architecture: str, lora: bool, now: float) -> dict[str, str]:
    """The modelspec.* fields of a LoRA (`architecture`/lora) or of a whole checkpoint."""
    declared = family(config.model.family)
    resolution = config.dataset.resolution
    spec = {
        "modelspec.sai_model_spec": MODEL_SPEC_VERSION,
        "modelspec.architecture": f"{architecture}/lora" if lora else architecture,
        # A whole checkpoint is written in the original (sgm) layout, whatever the family.
        "modelspec.implementation": declared.lora_implementation if lora else STABILITY_AI,
        "modelspec.title": config.output.name,
        "modelspec.resolution": f"{resolution}x{resolution}",
        "modelspec.date": datetime.fromtimestamp(int(now), UTC).isoformat(),
        "modelspec.description": f"{'LoRA' if lora else 'checkpoint'} trained with sd-training-studio",
        "modelspec.implementation_version": f"sd-training-studio/{__version__}",
    }
    spec["modelspec.prediction_type"] = prediction_type(config)
    if declared.setting("model.clip_skip") is not None and config.model.clip_skip > 1:
        spec["modelspec.encoder_layer"] = str(config.model.clip_skip)
    return spec


def prediction_type(config: TrainConfig, scheduler: str | None = None) -> Prediction:
    """What the file's model predicts: the family's declared target, or where the family trains on a DDPM
    schedule the one model.prediction_type chose, with "auto" the base's own (`scheduler`, its training
    scheduler's prediction_type: a v-prediction SD2 or fine-tune is "v")."""
    declared = family(config.model.family)
    chosen: str = config.model.prediction_type
    if chosen == "auto":
        chosen = scheduler or "auto"
    if declared.objective == "ddpm" and chosen in ("epsilon", "v_prediction"):
        return "v" if chosen == "v_prediction" else "epsilon"
    return declared.prediction


def folder_names(images: Iterable[Image]) -> dict[str, list[Image]]:
    """Images by the name of their folder, as sd-scripts keys its datasets ("10_dog"); a name used by
    two folders gets " (2)" on the second."""
    by_folder: dict[Path, list[Image]] = {}
    for image in images:
        by_folder.setdefault(image.path.parent, []).append(image)
    out: dict[str, list[Image]] = {}
    for folder, members in by_folder.items():
        name, number = folder.name, 2
        while name in out:
            name, number = f"{folder.name} ({number})", number + 1
        out[name] = members
    return out


def _dirs(groups: dict[str, list[Image]]) -> str:
    return json.dumps({name: {"n_repeats": Counter(i.repeats for i in members).most_common(1)[0][0],
                              "img_count": len(members)} for name, members in groups.items()})


def training_fields(config: TrainConfig, images: list[Any], step: int, started_at: float,
                    finished_at: float) -> dict[str, str]:
    """sd-scripts' ss_* keys that describe the run (the network's own are the kohya file's); a run
    set by steps has no epoch count and one set by epochs no step limit."""
    training, dataset = config.training, config.dataset
    instances = folder_names(i for i in images if not i.is_class)
    classes = folder_names(i for i in images if i.is_class)
    fields = {
        "ss_output_name": config.output.name,
        "ss_training_started_at": str(started_at),
        "ss_training_finished_at": str(finished_at),
        "ss_steps": str(step),
        "ss_max_train_steps": str(training.max_steps or ""),
        "ss_num_epochs": str(training.epochs or ""),
        "ss_resolution": f"({dataset.resolution}, {dataset.resolution})",
        "ss_enable_bucket": str(dataset.buckets),
        "ss_min_bucket_reso": str(dataset.min_bucket),
        "ss_max_bucket_reso": str(dataset.max_bucket),
        "ss_flip_aug": str(dataset.flip),
        "ss_random_crop": str(dataset.crop == "random"),
        "ss_shuffle_caption": str(dataset.shuffle_tags),
        "ss_keep_tokens": str(dataset.keep_tokens),
        "ss_caption_dropout_rate": str(dataset.caption_dropout),
        "ss_num_train_images": str(sum(i.repeats for i in images if not i.is_class)),
        "ss_num_reg_images": str(sum(len(members) for members in classes.values())),
        "ss_dataset_dirs": _dirs(instances),
        "ss_reg_dataset_dirs": _dirs(classes),
        "ss_tag_frequency": json.dumps({name: dict(tag_counts([i.caption for i in members]).most_common(TAGS_KEPT))
                                        for name, members in instances.items()}),
        "ss_batch_size_per_device": str(training.batch_size),
        "ss_gradient_accumulation_steps": str(training.gradient_accumulation),
        "ss_learning_rate": str(training.learning_rate),
        "ss_text_encoder_lr": str(training.text_encoder_lr or training.learning_rate),
        "ss_unet_lr": str(training.learning_rate),
        "ss_lr_scheduler": training.lr_scheduler,
        "ss_lr_warmup_steps": str(training.lr_warmup_steps),
        "ss_optimizer": training.optimizer,
        "ss_max_grad_norm": str(training.max_grad_norm),
        "ss_mixed_precision": training.mixed_precision,
        "ss_gradient_checkpointing": str(training.gradient_checkpointing),
        "ss_cache_latents": str(training.cache_latents),
        "ss_seed": str(training.seed),
        "ss_noise_offset": str(training.noise_offset),
        "ss_min_snr_gamma": str(training.min_snr_gamma),
        "ss_training_comment": f"trained with sd-training-studio {__version__}",
    }
    return {key: value for key, value in fields.items() if value}
