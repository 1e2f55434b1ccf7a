"""SD 1.x / 2.x: a UNet with one CLIP text encoder, trained on a DDPM noise schedule."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from studio.core.families.settings import CLIP_SKIP, COMMON, CONVOLUTIONS, DDPM, SEPARATE_VAE
from studio.core.families.spec import CLIP_TOKEN_LIMIT, DIFFUSERS, CheckpointKind, FamilySpec, Shape

NAME = "sd15"
_UNET = "model.diffusion_model."
_INPAINTING = "the studio trains text-to-image models only; choose the base (non-inpainting) model"


def _kind(keys: set[str], shape: Shape) -> str | None:
    """v1 / v2 (and their inpainting models) by the cross-attention width and the UNet's input channels."""
    context = shape(_UNET + "input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight")
    if not context or any(k.startswith("conditioner.embedders.") for k in keys) or _UNET + "label_emb.0.0.weight" in keys:
        return None
    conv_in = shape(_UNET + "input_blocks.0.0.weight")
    in_channels = conv_in[1] if conv_in and len(conv_in) > 1 else 0
    if context[-1] == 768:
        return {4: "v1", 9: "inpainting"}.get(in_channels)
    if context[-1] == 1024:
        return {4: "v2", 9: "v2_inpainting"}.get(in_channels)
    return None


def _tensors(keys: set[str]) -> str | None:
    if any(k.startswith(_UNET + "input_blocks") for k in keys) and any(k.startswith("cond_stage_model") for k in keys):
        return "it has an SD 1.x/2.x UNet and cond_stage_model"
    return None


def _folder(folder: Path, read: Callable[[Path], dict[str, object]]) -> str | None:
    unet = folder / "unet" / "config.json"
    if unet.is_file() and read(unet).get("addition_embed_type") != "text_time":
        return "unet/config.json has no SDXL conditioning"
    return None


FAMILY = FamilySpec(
    name=NAME,
    title="SD 1.x/2.x",
    objective="ddpm",
    prediction="epsilon",
    lora_implementation=DIFFUSERS,
    caption_token_limit=CLIP_TOKEN_LIMIT,  # CLIP's 77 tokens less its start/end markers
    caption_encoder="CLIP",
    pipeline_class="StableDiffusionPipeline",
    pipeline_classes=("StableDiffusionPipeline", "StableDiffusionImg2ImgPipeline", "StableDiffusionInpaintPipeline"),
    kohya_readers="ComfyUI, A1111/Forge and sd-scripts",
    lycoris_readers="ComfyUI, A1111/Forge and sd-scripts with LyCORIS",
    denoiser="unet",
    components=("unet", "vae", "text_encoder", "tokenizer", "scheduler"),
    native_resolution=512,
    sample_steps=25,
    sample_guidance=7.0,
    pixel_multiple=8,
    settings=(*DDPM, CLIP_SKIP, *COMMON, *CONVOLUTIONS, SEPARATE_VAE),
    fsdp_units=("ResnetBlock2D", "BasicTransformerBlock", "Transformer2DModel", "Downsample2D", "Upsample2D"),
    checkpointed_blocks=("ResnetBlock2D", "BasicTransformerBlock"),
    download_gb=4.5,
    kinds=(
        CheckpointKind("v1", "Stable Diffusion 1.x", offline=True),
        CheckpointKind("v2", "Stable Diffusion 2.x"),
        CheckpointKind("inpainting", "Stable Diffusion 1.x inpainting", refused=_INPAINTING),
        CheckpointKind("v2_inpainting", "Stable Diffusion 2.x inpainting", refused=_INPAINTING),
    ),
    single_file_text_encoders=("cond_stage_model.",),
    modelspec_architecture="stable-diffusion-v1",
    checkpoint_kind=_kind,
    tensor_rule=_tensors,
    folder_rule=_folder,
)
