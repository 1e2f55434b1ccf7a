"""The finished model in RUN_DIR/output: LoRA files (diffusers + kohya) or a DreamBooth pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from studio import __version__
from studio.core.caption_tags import tag_counts
from studio.core.files import atomic_write_text
from studio.core.runs import OUTPUT_DIR
from studio.train.data import TrainItem
from studio.train.families.base import Components, FamilyAdapter

SAVE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def lora_layers(adapter: FamilyAdapter, components: Components) -> dict[str, dict[str, torch.Tensor]]:
    """peft-format LoRA state dicts keyed by the pipeline's component names."""
    from peft.utils import get_peft_model_state_dict

    layers = {adapter.denoiser_name: get_peft_model_state_dict(components.denoiser)}
    if adapter.config.method.train_text_encoder:
        for name, encoder in zip(adapter.text_encoder_names, adapter.trainable_encoders(components), strict=False):
            layers[name] = get_peft_model_state_dict(encoder)
    return layers


def _adapter_config(module: torch.nn.Module) -> dict[str, Any]:
    config = getattr(module, "peft_config", {}).get("default")
    return config.to_dict() if config is not None else {}


def training_metadata(adapter: FamilyAdapter, items: list[TrainItem], step: int) -> dict[str, str]:
    """What a LoRA file says about its making (kohya's ss_* keys, which LoRA browsers show)."""
    config = adapter.config
    by_concept: dict[str, dict[str, int]] = {}
    for concept in config.dataset.concepts:
        captions = [i.caption for i in items if not i.is_class and str(i.path).startswith(concept.path)]
        by_concept[Path(concept.path).name] = dict(tag_counts(captions).most_common(500))
    return {
        "ss_sd_model_name": Path(config.model.base).name,
        "ss_base_model": config.model.base,
        "ss_steps": str(step),
        "ss_resolution": str(config.dataset.resolution),
        "ss_learning_rate": str(config.training.learning_rate),
        "ss_num_train_images": str(sum(i.repeats for i in items if not i.is_class)),
        "ss_tag_frequency": json.dumps(by_concept),
        "ss_training_comment": f"trained with sd-training-studio {__version__}",
        "modelspec.title": config.output.name,
    }


def save_outputs(adapter: FamilyAdapter, components: Components, run_dir: Path,
                 items: list[TrainItem], step: int) -> list[Path]:
    """Write the run's outputs (rank 0 only) and a training_info.json beside them."""
    config = adapter.config
    folder = run_dir / OUTPUT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    metadata = training_metadata(adapter, items, step)
    if config.method.kind == "lora":
        layers = lora_layers(adapter, components)
        configs = {adapter.denoiser_name: _adapter_config(components.denoiser)}
        for name, encoder in zip(adapter.text_encoder_names, adapter.trainable_encoders(components), strict=False):
            if name in layers:
                configs[name] = _adapter_config(encoder)
        written = adapter.save_lora(folder, layers, metadata, configs)
    else:
        written = adapter.save_full(folder, components, SAVE_DTYPES[config.output.save_precision])
    info = {"family": config.model.family, "method": config.method.kind, "step": step,
            "outputs": [str(p) for p in written], **metadata}
    atomic_write_text(folder / "training_info.json", json.dumps(info, indent=2))
    return written
