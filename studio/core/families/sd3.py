"""SD3 / SD3.5: an MMDiT transformer with two CLIP encoders and an optional T5, trained by flow matching."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from studio.core.families.settings import BLOCK_SWAP, BLOCKS, COMMON, FLOW_MATCHING, SEPARATE_VAE, T5
from studio.core.families.spec import DIFFUSERS, CheckpointKind, FamilySpec, Shape

NAME = "sd3"


def _kind(keys: set[str], shape: Shape) -> str | None:
    joint = [k for k in keys if "joint_blocks." in k]  # a substring test first: regexes on thousands of keys are slow
    blocks = {int(m.group(1)) for k in joint if (m := re.match(r"model\.diffusion_model\.joint_blocks\.(\d+)\.", k))}
    if not blocks:
        return None
    if any(".x_block.attn2." in k for k in joint):
        return "sd35_medium"
    return {24: "sd3", 38: "sd35_large"}.get(max(blocks) + 1)


def _tensors(keys: set[str]) -> str | None:
    return "it has MMDiT joint_blocks" if any("joint_blocks" in k for k in keys) else None


def _folder(folder: Path, read: Callable[[Path], dict[str, object]]) -> str | None:
    transformer = folder / "transformer" / "config.json"
    if transformer.is_file() and read(transformer).get("_class_name") == "SD3Transformer2DModel":
        return "transformer/config.json names SD3Transformer2DModel"
    return None


FAMILY = FamilySpec(
    name=NAME,
    title="SD3",
    objective="flow_matching",
    prediction="flow",
    lora_implementation=DIFFUSERS,
    # The CLIP encoders stop at 75 tokens, but T5 (when model.use_t5 is on) reads the pipeline's 256.
    caption_token_limit=256,
    caption_encoder="T5",
    pipeline_class="StableDiffusion3Pipeline",
    pipeline_classes=("StableDiffusion3Pipeline",),
    denoiser="transformer",
    components=("transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3",
                "tokenizer", "tokenizer_2", "tokenizer_3", "scheduler"),
    native_resolution=1024,
    sample_steps=28,
    sample_guidance=5.0,
    pixel_multiple=16,
    settings=(*FLOW_MATCHING, T5, BLOCKS, *COMMON, BLOCK_SWAP, SEPARATE_VAE),
    fsdp_units=("JointTransformerBlock",),
    checkpointed_blocks=("JointTransformerBlock",),
    repeated_blocks=("JointTransformerBlock",),  # SD3Transformer2DModel does not name them
    download_gb=16.0,
    kinds=(
        CheckpointKind("sd3", "SD3 medium", offline=True, hub_when=("use_t5", "the T5 encoder's config and tokenizer")),
        CheckpointKind("sd35_medium", "SD3.5 medium"),
        CheckpointKind("sd35_large", "SD3.5 large"),
    ),
    single_file_text_encoders=("text_encoders.clip_l.", "text_encoders.clip_g."),
    missing_text_encoder_example=" (sd3_medium.safetensors is such a file; sd3_medium_incl_clips.safetensors is not)",
    checkpoint_kind=_kind,
    tensor_rule=_tensors,
    folder_rule=_folder,
)
