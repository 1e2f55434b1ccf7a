"""Qwen-Image (20B): a double-stream MMDiT with the Qwen2.5-VL-7B text encoder and its own causal VAE, trained by
flow matching.

Qwen/Qwen-Image and Qwen-Image-2512 (the same architecture) train as they are; the studio trains LoRAs of the
transformer, the text encoder frozen (its embeddings are cached).

Qwen/Qwen-Image-Edit (`QwenImageEditPipeline`) is the same transformer conditioned on a control image, which it
sees twice: its latents packed after the image's tokens, and in the prompt, where the Qwen2.5-VL encoder reads it
through its vision tower. It is this family's edit model (`edit_model`, the same counted architecture): it trains
edit pairs (dataset.kind = "edit", one control image per pair), each caption embedded with its pair's control,
and Qwen-Image trains images. The Edit Plus models (`QwenImageEditPlusPipeline`, Qwen-Image-Edit-2509 and -2511)
take several controls, resized otherwise, in another template: they are not this family (their folders are not
taken for it).

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
EDIT_HUB_ID = "Qwen/Qwen-Image-Edit"
# Pipelines of the same transformer class that condition on images otherwise: other training, not this family's.
_NOT_THIS = ("EditPlus", "Layered", "ControlNet")


def _folder(folder: Path, read: Callable[[Path], dict[str, object]]) -> str | None:
    transformer = folder / "transformer" / "config.json"
    if not transformer.is_file() or read(transformer).get("_class_name") != "QwenImageTransformer2DModel":
        return None
    index = folder / "model_index.json"
    pipeline = str(read(index).get("_class_name", "")) if index.is_file() else ""
    if any(word in pipeline for word in _NOT_THIS):
        return None
    return "transformer/config.json names QwenImageTransformer2DModel"


def is_edit_model(base: str) -> bool:
    """Whether a base model is Qwen-Image-Edit: a folder whose model_index.json names QwenImageEditPipeline, or the
    hub id Qwen/Qwen-Image-Edit (any owner)."""
    folder = Path(base).expanduser()
    if folder.is_dir():
        try:
            index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(index, dict) and index.get("_class_name") == EDIT_PIPELINE
    if folder.suffix or base.count("/") != 1:  # a single file, or no hub id
        return False
    return base.split("/")[1].lower() == EDIT_HUB_ID.split("/")[1].lower()


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
    pipeline_classes=("QwenImagePipeline", EDIT_PIPELINE),
    kohya_readers="ComfyUI, musubi-tuner and diffusers",
    denoiser="transformer",
    components=("transformer", "vae", "text_encoder", "tokenizer", "scheduler"),
    native_resolution=1024,
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
    # Its edit model, Qwen-Image-Edit, packs the control's latents after the image tokens as QwenImageEditPipeline.
    trains_edit_pairs=True,
    edit_model=is_edit_model,
    edit_title="Qwen-Image-Edit",
    edit_controls=1,  # QwenImageEditPipeline edits one image
    folder_rule=_folder,
)
