"""Z-Image (6B): a single-stream transformer with one Qwen3-4B text encoder and FLUX.1's VAE, trained by flow matching.

Z-Image (the undistilled base, Tongyi-MAI/Z-Image) trains as it is. Z-Image Turbo is step-distilled
(8 steps, no guidance): a LoRA trained on it as it is breaks the distillation, so a run on Turbo can
name a training adapter (`model.training_adapter`, a LoRA file such as the community's Turbo training
adapter) that is merged into the transformer for training and left out of the outputs; the LoRA
then applies to Turbo without undoing its few-step sampling. The studio trains LoRAs of it; the text
encoder stays frozen (its embeddings are cached).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from studio.core.families.settings import BLOCK_SWAP, COMMON, FLOW_MATCHING, TRAINING_ADAPTER
from studio.core.families.spec import FamilySpec

NAME = "zimage"
# Turbo's samples: 8 steps without guidance, as diffusers' ZImagePipeline example (0.42) samples Tongyi-MAI/Z-Image-Turbo
# ("guidance should be 0 for the Turbo models"); the family's 28 steps at guidance 4.0 are the base model's.
TURBO_SAMPLING = (8, 0.0)


def is_turbo(base: str) -> bool:
    """Whether a base model is Z-Image Turbo, by its name: a hub id (any owner), a folder named after it
    (Z-Image-Turbo, z_image_turbo, ...) or the hub cache's snapshot of it (models--Tongyi-MAI--Z-Image-Turbo)."""
    parts = [part for part in re.split(r"[\\/]+", base.strip()) if part]
    if len(parts) >= 3 and parts[-2] == "snapshots":
        parts = parts[:-2]
    name = parts[-1].rsplit("--", 1)[-1] if parts else ""
    return "zimageturbo" in re.sub(r"[^a-z0-9]", "", name.lower())


def _folder(folder: Path, read: Callable[[Path], dict[str, object]]) -> str | None:
    transformer = folder / "transformer" / "config.json"
    if transformer.is_file() and read(transformer).get("_class_name") == "ZImageTransformer2DModel":
        return "transformer/config.json names ZImageTransformer2DModel"
    return None


FAMILY = FamilySpec(
    name=NAME,
    title="Z-Image",
    objective="flow_matching",
    prediction="flow",
    # As kohya's musubi-tuner, which trains it, names it (src/musubi_tuner/utils/sai_model_spec.py).
    lora_implementation="https://github.com/Tongyi-MAI/Z-Image",
    caption_token_limit=512,  # the pipeline's max_sequence_length of Qwen3 tokens
    caption_encoder="Qwen3",
    pipeline_class="ZImagePipeline",
    pipeline_classes=("ZImagePipeline",),
    denoiser="transformer",
    components=("transformer", "vae", "text_encoder", "tokenizer", "scheduler"),
    native_resolution=1024,
    sample_steps=28,
    sample_guidance=4.0,
    sampling_of=lambda base: TURBO_SAMPLING if is_turbo(base) else None,
    negative_prompt_above=0.0,  # ZImagePipeline guides at any guidance above 0
    pixel_multiple=16,
    settings=(*FLOW_MATCHING, *COMMON, TRAINING_ADAPTER, BLOCK_SWAP),
    fsdp_units=("ZImageTransformerBlock",),
    checkpointed_blocks=("ZImageTransformerBlock",),
    download_gb=21.0,  # the bf16 transformer (12.3 GB), the Qwen3-4B encoder (8 GB) and the VAE
    kinds=(),
    single_file_text_encoders=(),
    methods=("lora",),
    trains_text_encoders=False,
    folder_rule=_folder,
)
