"""Qwen-Image (20B): a double-stream MMDiT with the Qwen2.5-VL-7B text encoder and its own causal VAE, trained by
flow matching.

Qwen/Qwen-Image and Qwen-Image-2512 (the same architecture) train as they are; the studio trains LoRAs of the
transformer, the text encoder frozen (its embeddings are cached). The Edit models (`QwenImageEditPipeline`,
`QwenImageEditPlusPipeline`) share the transformer class but condition on a reference image, which their
Qwen2.5-VL encoder also sees in the prompt: they are not this family (their folders are not taken for it), and
edit pairs (dataset.kind = "edit") are refused for it (`trains_edit_pairs` is off) until they train here.

Qwen-Image 2.1 does not train the same way: diffusers 0.42 runs it as `QwenImage21Pipeline` with another
transformer (`QwenImage21Transformer2DModel`, a cached text/condition prefix and flex attention), another
VAE (`AutoencoderKLQwenImage21`) and a Qwen3-VL text encoder (`Qwen3VLForConditionalGeneration`), so it
would be a family of its own, with its own adapter and key names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from studio.core.families.settings import BLOCK_SWAP, COMMON, FLOW_MATCHING
from studio.core.families.spec import FamilySpec

NAME = "qwen-image"
# Pipelines of the same transformer class that condition on an image: other training, not this family's.
_NOT_THIS = ("Edit", "Layered", "ControlNet")


def _folder(folder: Path, read: Callable[[Path], dict[str, object]]) -> str | None:
    transformer = folder / "transformer" / "config.json"
    if not transformer.is_file() or read(transformer).get("_class_name") != "QwenImageTransformer2DModel":
        return None
    index = folder / "model_index.json"
    pipeline = str(read(index).get("_class_name", "")) if index.is_file() else ""
    if any(word in pipeline for word in _NOT_THIS):
        return None
    return "transformer/config.json names QwenImageTransformer2DModel"


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
    pipeline_classes=("QwenImagePipeline",),
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
    folder_rule=_folder,
)
