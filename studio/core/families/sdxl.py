"""SDXL: a UNet with two CLIP text encoders and size conditioning, trained on a DDPM noise schedule."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from studio.core.families import sd15
from studio.core.families.settings import COMMON, CONVOLUTIONS, DDPM, SEPARATE_VAE
from studio.core.families.spec import CLIP_TOKEN_LIMIT, STABILITY_AI, CheckpointKind, FamilySpec, Shape

NAME = "sdxl"
_UNET = "model.diffusion_model."


def _kind(keys: set[str], shape: Shape) -> str | None:
    if any(k.startswith("conditioner.embedders.1.") for k in keys):
        conv_in = shape(_UNET + "input_blocks.0.0.weight")
        in_channels = conv_in[1] if conv_in and len(conv_in) > 1 else 0
        return {4: "xl_base", 9: "xl_inpaint"}.get(in_channels)
    if _UNET + "label_emb.0.0.weight" in keys:
        return "xl_refiner"
    return None


def _tensors(keys: set[str]) -> str | None:
    if any(k.startswith("conditioner.embedders.1") or "label_emb" in k for k in keys):
        return "it has SDXL's second text encoder (conditioner.embedders.1) / label_emb"
    return None


def _folder(folder: Path, read: Callable[[Path], dict[str, object]]) -> str | None:
    unet = folder / "unet" / "config.json"
    if unet.is_file() and read(unet).get("addition_embed_type") == "text_time":
        return "unet/config.json has SDXL's text_time conditioning"
    return None


FAMILY = FamilySpec(
    name=NAME,
    title="SDXL",
    objective="ddpm",
    prediction="epsilon",
    lora_implementation=STABILITY_AI,
    caption_token_limit=CLIP_TOKEN_LIMIT,  # CLIP's 77 tokens less its start/end markers
    caption_encoder="CLIP",
    pipeline_class="StableDiffusionXLPipeline",
    pipeline_classes=("StableDiffusionXLPipeline", "StableDiffusionXLImg2ImgPipeline"),
    kohya_readers="ComfyUI, A1111/Forge and sd-scripts",
    lycoris_readers="ComfyUI, A1111/Forge and sd-scripts with LyCORIS",
    denoiser="unet",
    components=("unet", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler"),
    native_resolution=1024,
    sample_steps=30,
    sample_guidance=6.0,
    pixel_multiple=8,
    settings=(*DDPM, *COMMON, *CONVOLUTIONS, SEPARATE_VAE),
    fsdp_units=sd15.FAMILY.fsdp_units,
    checkpointed_blocks=sd15.FAMILY.checkpointed_blocks,
    download_gb=7.0,
    kinds=(
        CheckpointKind("xl_base", "SDXL base", offline=True),
        CheckpointKind("xl_inpaint", "SDXL inpainting", refused=sd15._INPAINTING),
        CheckpointKind("xl_refiner", "SDXL refiner",
                       refused="the SDXL refiner has no CLIP-L text encoder and is not trained on its own; "
                               "choose an SDXL base model"),
    ),
    single_file_text_encoders=("conditioner.embedders.0.",),
    modelspec_architecture="stable-diffusion-xl-v1-base",
    # Its VAE overflows in fp16; a separate VAE given for SDXL is the fp16-safe fix.
    separate_vae_fp16_safe=True,
    checkpoint_kind=_kind,
    tensor_rule=_tensors,
    folder_rule=_folder,
)
