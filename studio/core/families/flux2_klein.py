"""FLUX.2 [klein] (4B and 9B): a Flux.2 transformer with one Qwen3 text encoder, trained by flow matching.

The 4B and the 9B are separate architectures (a LoRA of one does not load on the other), so the
estimate reads `resources/architectures/flux2-klein-<size>.json` for the size the base model is: a
model folder says so in its transformer's config (the text width, three Qwen3 layers: 7,680 for the
4B, 12,288 for the 9B), a hub id by its name. The studio trains LoRAs of it; the text encoder stays
frozen (its embeddings are cached).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from studio.core.families.settings import BLOCK_SWAP, COMMON, FLOW_MATCHING
from studio.core.families.spec import FamilySpec

NAME = "flux2-klein"
SIZES = ("4b", "9b")
# The undistilled base models are the ones to train; the distilled ones sample in 4 steps.
BASE_MODELS = {"4b": "black-forest-labs/FLUX.2-klein-base-4B", "9b": "black-forest-labs/FLUX.2-klein-base-9B"}
# The transformer's joint_attention_dim of each size.
TEXT_WIDTHS = {7680: "4b", 12288: "9b"}


def size_of(base: str) -> str:
    """"4b" or "9b": from a model folder's transformer config, else from the name (the 4B when it says neither)."""
    config = Path(base).expanduser() / "transformer" / "config.json"
    try:
        width = json.loads(config.read_text(encoding="utf-8")).get("joint_attention_dim")
    except (OSError, ValueError, AttributeError):
        width = None
    if isinstance(width, int) and width in TEXT_WIDTHS:
        return TEXT_WIDTHS[width]
    return "9b" if "9b" in base.lower() else "4b"


def guidance_distilled(base: str) -> bool:
    """Whether a base model is a distilled [klein] (4 steps, no negative prompt): a model folder says so in its
    model_index.json (is_distilled), a hub id of Black Forest Labs' by its name (FLUX.2-klein-4B, not -base-)."""
    index = Path(base).expanduser() / "model_index.json"
    if index.is_file():
        try:
            return json.loads(index.read_text(encoding="utf-8")).get("is_distilled") is True
        except (OSError, ValueError, AttributeError):
            return False
    return re.fullmatch(r"black-forest-labs/flux\.2-klein-(4b|9b)", base.strip().lower()) is not None


def _folder(folder: Path, read: Callable[[Path], dict[str, object]]) -> str | None:
    transformer = folder / "transformer" / "config.json"
    if transformer.is_file() and read(transformer).get("_class_name") == "Flux2Transformer2DModel":
        return "transformer/config.json names Flux2Transformer2DModel"
    return None


FAMILY = FamilySpec(
    name=NAME,
    title="FLUX.2 [klein]",
    objective="flow_matching",
    prediction="flow",
    # As kohya's musubi-tuner, which trains it, names it (src/musubi_tuner/utils/sai_model_spec.py).
    lora_implementation="https://github.com/black-forest-labs/flux2",
    caption_token_limit=512,  # the pipeline's max_sequence_length of Qwen3 tokens
    caption_encoder="Qwen3",
    pipeline_class="Flux2KleinPipeline",
    pipeline_classes=("Flux2KleinPipeline",),
    kohya_readers="ComfyUI and diffusers",
    denoiser="transformer",
    components=("transformer", "vae", "text_encoder", "tokenizer", "scheduler"),
    native_resolution=1024,
    sample_steps=28,
    sample_guidance=4.0,
    pixel_multiple=16,
    # Its scheduler's training schedule is used unshifted (as diffusers' [klein] example trains): no shift.
    settings=(*(s for s in FLOW_MATCHING if s.key != "training.shift"), *COMMON, BLOCK_SWAP),
    fsdp_units=("Flux2TransformerBlock", "Flux2SingleTransformerBlock"),
    checkpointed_blocks=("Flux2TransformerBlock", "Flux2SingleTransformerBlock"),
    download_gb=16.0,
    kinds=(),
    single_file_text_encoders=(),
    methods=("lora",),
    trains_text_encoders=False,
    # Flux2KleinPipeline(image=...) packs the reference images' latents after the image tokens.
    trains_edit_pairs=True,
    size_of=size_of,
    guidance_distilled=guidance_distilled,
    size_bases=BASE_MODELS,
    size_download_gb={"4b": 16.0, "9b": 35.0},
    folder_rule=_folder,
)
