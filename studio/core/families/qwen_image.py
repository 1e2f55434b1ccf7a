"""Qwen-Image (20B): a double-stream MMDiT with the Qwen2.5-VL-7B text encoder and its own causal VAE, trained by
flow matching.

Qwen/Qwen-Image and Qwen-Image-2512 (the same architecture) train as they are; the studio trains LoRAs of the
transformer, the text encoder frozen (its embeddings are cached).

Qwen/Qwen-Image-Edit (`QwenImageEditPipeline`) is the same transformer conditioned on a control image, which it
sees twice: its latents packed after the image's tokens, and in the prompt, where the Qwen2.5-VL encoder reads it
through its vision tower. Qwen-Image-Edit-2509 and -2511 (`QwenImageEditPlusPipeline`, "Edit Plus") take one or
more controls, each shown to the encoder as "Picture N:" at a smaller size (384 x 384 pixels) than its latents
(1024 x 1024). They are this family's edit models (`edit_model`, the same counted architecture): they train edit
pairs (dataset.kind = "edit"; one control per pair on Qwen-Image-Edit), each caption embedded with its pair's
controls, and Qwen-Image trains images.

Qwen-Image 2.1 does not train the same way: diffusers 0.42 runs it as `QwenImage21Pipeline` with another
transformer (`QwenImage21Transformer2DModel`, a cached text/condition prefix and flex attention), another
VAE (`AutoencoderKLQwenImage21`) and a Qwen3-VL text encoder (`Qwen3VLForConditionalGeneration`), so it
would be a family of its own, with its own adapter and key names.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from studio.core.families.settings import BLOCK_SWAP, COMMON, FLOW_MATCHING
from studio.core.families.spec import FamilySpec

NAME = "qwen-image"
EDIT_PIPELINE = "QwenImageEditPipeline"
EDIT_PLUS_PIPELINE = "QwenImageEditPlusPipeline"
# The edit models' hub names (any owner): Qwen-Image-Edit, and the Edit Plus releases.
EDIT_HUB_NAMES = {"qwen-image-edit": EDIT_PIPELINE, "qwen-image-edit-2509": EDIT_PLUS_PIPELINE,
                  "qwen-image-edit-2511": EDIT_PLUS_PIPELINE}
# Pipelines of the same transformer class that condition on images otherwise: other training, not this family's.
_NOT_THIS = ("EditInpaint", "Layered", "ControlNet")


def _folder(folder: Path, read: Callable[[Path], dict[str, object]]) -> str | None:
    transformer = folder / "transformer" / "config.json"
    if not transformer.is_file() or read(transformer).get("_class_name") != "QwenImageTransformer2DModel":
        return None
    index = folder / "model_index.json"
    pipeline = str(read(index).get("_class_name", "")) if index.is_file() else ""
    if any(word in pipeline for word in _NOT_THIS):
        return None
    return "transformer/config.json names QwenImageTransformer2DModel"


def edit_pipeline(base: str) -> str | None:
    """The edit pipeline a base model is (QwenImageEditPipeline or QwenImageEditPlusPipeline): a folder's
    model_index.json, or a hub id's name; None for Qwen-Image itself (or no model the studio can read)."""
    folder = Path(base).expanduser()
    if folder.is_dir():
        try:
            index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        name = index.get("_class_name") if isinstance(index, dict) else None
        return name if name in (EDIT_PIPELINE, EDIT_PLUS_PIPELINE) else None
    if folder.suffix or base.count("/") != 1:  # a single file, or no hub id
        return None
    return EDIT_HUB_NAMES.get(base.split("/")[1].lower())


def is_edit_model(base: str) -> bool:
    """Whether a base model is one of the edit models (Qwen-Image-Edit, or an Edit Plus release)."""
    return edit_pipeline(base) is not None


def edit_controls(base: str) -> int:
    """The control images a pair may have on this edit model: one on Qwen-Image-Edit, any number on Edit Plus."""
    return 1 if edit_pipeline(base) == EDIT_PIPELINE else 0


FAMILY = FamilySpec(
    name=NAME,
    title="Qwen-Image",
    objective="flow_matching",
    prediction="flow",
    # As kohya's musubi-tuner, which trains it, names it (src/musubi_tuner/utils/sai_model_spec.py).
    lora_implementation="https://github.com/QwenLM/Qwen-Image",
    # The pipeline's max_sequence_length of Qwen2.5-VL tokens after its system prompt (34 tokens) is dropped.
    caption_token_limit=512,
    caption_encoder="Qwen2.5-VL",
    pipeline_class="QwenImagePipeline",
    pipeline_classes=("QwenImagePipeline", EDIT_PIPELINE, EDIT_PLUS_PIPELINE),
    kohya_readers="ComfyUI, musubi-tuner and diffusers",
    denoiser="transformer",
    components=("transformer", "vae", "text_encoder", "tokenizer", "scheduler"),
    native_resolution=1024,
    sample_steps=30,
    sample_guidance=4.0,
    pixel_multiple=16,
    # Its scheduler shifts by resolution when sampling; training uses the unshifted schedule (as diffusers'
    # Qwen-Image example trains, its dynamic-shifting scheduler ignores a fixed shift): no training.shift.
    settings=(*(s for s in FLOW_MATCHING if s.key != "training.shift"), *COMMON, BLOCK_SWAP),
    fsdp_units=("QwenImageTransformerBlock",),
    checkpointed_blocks=("QwenImageTransformerBlock",),
    # The bf16 transformer (40.9 GB), the Qwen2.5-VL-7B encoder (16.6 GB) and the VAE (0.25 GB).
    download_gb=58.0,
    kinds=(),
    single_file_text_encoders=(),
    methods=("lora",),
    trains_text_encoders=False,
    # Its edit models pack the controls' latents after the image tokens, as QwenImageEdit(Plus)Pipeline.
    trains_edit_pairs=True,
    edit_model=is_edit_model,
    edit_title="Qwen-Image-Edit",
    edit_controls=edit_controls,
    folder_rule=_folder,
)
