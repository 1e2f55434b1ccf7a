"""Tiny random-weight pipelines built offline with the real diffusers classes (tests and the demo).

The weights are seeded, so the same call always writes the same model; the
tokenizer is written locally and knows every word of the demo captions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.demo import CAPTION_WORDS
from studio.train.tiny_tokenizer import write_tokenizer

# Words people type in sample prompts and DreamBooth prompts, kept whole by the tokenizer.
EXTRA_WORDS = ("photo", "of", "sks", "dog", "cat", "shape", "picture", "style", "an", "the", "and", "with")
TOKEN_LENGTH = 32


def _sd15(folder: Path, seed: int, prediction_type: str = "epsilon") -> Path:
    import torch
    from diffusers import (
        AutoencoderKL,
        DDPMScheduler,
        PNDMScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    tokenizer_dir = write_tokenizer(folder / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], TOKEN_LENGTH)
    tokenizer = CLIPTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=8,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        # Four blocks: eight times smaller latents, as in the real SD1.5 VAE.
        block_out_channels=(8, 16, 32, 32),
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        latent_channels=4,
        norm_num_groups=8,
        sample_size=64,
    )
    text_config = CLIPTextConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_hidden_layers=2,
        vocab_size=len(tokenizer),
        max_position_embeddings=TOKEN_LENGTH,
        projection_dim=32,
    )
    text_encoder = CLIPTextModel(text_config)
    schedule: dict[str, Any] = {
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "num_train_timesteps": 1000,
        "steps_offset": 1,
        "prediction_type": prediction_type,
    }
    # The sampler SD1.5 ships with; training reads the same config as a DDPM scheduler.
    scheduler = PNDMScheduler(skip_prk_steps=True, set_alpha_to_one=False, **schedule)
    assert DDPMScheduler.from_config(scheduler.config).config.prediction_type == prediction_type  # type: ignore[attr-defined]
    pipeline = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipeline.save_pretrained(folder, safe_serialization=True)  # type: ignore[attr-defined]
    return folder


_BUILDERS: dict[str, Callable[..., Path]] = {"sd15": _sd15}


def tiny_families() -> list[str]:
    return sorted(_BUILDERS)


def build_tiny_pipeline(family: str, directory: str | Path, seed: int = 0, **options: Any) -> Path:
    """Write a tiny diffusers pipeline folder for `family` into `directory` and return it."""
    builder = _BUILDERS.get(family)
    if builder is None:
        raise ValueError(
            f"no tiny pipeline for family {family!r}; available: {', '.join(tiny_families())}"
        )
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    return builder(folder, seed, **options)
