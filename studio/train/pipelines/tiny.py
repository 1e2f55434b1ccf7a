"""Tiny random-weight pipelines built offline with the real diffusers classes (tests and the demo).

The weights are seeded, so the same call always writes the same model; the
tokenizer is written locally and knows every word of the demo captions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.dataset.demo_shapes import CAPTION_WORDS
from studio.train.pipelines.hub_layout import write_hub_layout
from studio.train.pipelines.tiny_tokenizer import write_tokenizer

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
    write_hub_layout(folder)
    return folder


def _clip(tokenizer: Any, hidden: int, projection: bool) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, hidden_size=hidden, intermediate_size=2 * hidden,
        num_attention_heads=4, num_hidden_layers=2, vocab_size=len(tokenizer),
        max_position_embeddings=TOKEN_LENGTH, projection_dim=hidden,
    )
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(config)


def _tiny_vae(latent_channels: int, **extra: Any) -> Any:
    from diffusers import AutoencoderKL

    # Four blocks: eight times smaller latents, as in the real VAEs.
    return AutoencoderKL(
        in_channels=3, out_channels=3, block_out_channels=(8, 16, 32, 32),
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        latent_channels=latent_channels, norm_num_groups=8, sample_size=64, **extra,
    )


def _sdxl(folder: Path, seed: int) -> Path:
    """SDXL's structure in miniature: CLIP-L-like and bigG-like encoders, text_time conditioning."""
    import torch
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(
        write_tokenizer(folder / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], TOKEN_LENGTH))
    torch.manual_seed(seed)
    first, second = _clip(tokenizer, 32, projection=False), _clip(tokenizer, 32, projection=True)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4), use_linear_projection=True, transformer_layers_per_block=(1, 2),
        addition_embed_type="text_time", addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=6 * 8 + 32,  # six time ids, then the pooled embedding
        cross_attention_dim=64, norm_num_groups=8,
    )
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
        steps_offset=1, timestep_spacing="leading", prediction_type="epsilon",
    )
    pipeline = StableDiffusionXLPipeline(
        vae=_tiny_vae(4, scaling_factor=0.13025), text_encoder=first, text_encoder_2=second, tokenizer=tokenizer,
        tokenizer_2=tokenizer, unet=unet, scheduler=scheduler, add_watermarker=False,
    )
    pipeline.save_pretrained(folder, safe_serialization=True)  # type: ignore[attr-defined]
    write_hub_layout(folder)
    return folder


def _t5_tokenizer(folder: Path, words: list[str]) -> Any:
    """A unigram T5 tokenizer written locally into folder/tokenizer_3 (no sentencepiece model needed)."""
    import string

    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    pieces += [(f"\u2581{w}", -1.0) for w in sorted({w.lower() for w in words})]
    pieces += [(c, -3.0) for c in string.ascii_lowercase + string.digits + string.punctuation]
    T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=256).save_pretrained(folder / "tokenizer_3")
    return T5Tokenizer.from_pretrained(folder / "tokenizer_3")


def _t5(folder: Path, words: list[str]) -> tuple[Any, Any]:
    """A tiny T5 encoder, as wide as the tiny transformer's joint attention (T5-XXL is for SD3)."""
    from transformers import T5Config, T5EncoderModel

    tokenizer = _t5_tokenizer(folder, words)
    encoder = T5EncoderModel(T5Config(vocab_size=len(tokenizer), d_model=96, d_kv=24, d_ff=128, num_layers=2,
                                      num_heads=4, relative_attention_num_buckets=8, pad_token_id=0,
                                      eos_token_id=1))
    return encoder, tokenizer


def _sd3(folder: Path, seed: int, t5: bool = False) -> Path:
    """SD3's structure in miniature: two CLIP encoders with projections, an MMDiT, a 16-channel VAE."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTokenizer

    words = [*CAPTION_WORDS, *EXTRA_WORDS]
    tokenizer = CLIPTokenizer.from_pretrained(write_tokenizer(folder / "tokenizer", words, TOKEN_LENGTH))
    torch.manual_seed(seed)
    first, second = _clip(tokenizer, 32, projection=True), _clip(tokenizer, 48, projection=True)
    transformer = SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=96, caption_projection_dim=32,
        pooled_projection_dim=32 + 48, pos_embed_max_size=32,
    )
    t5_encoder, t5_tokenizer = _t5(folder, words) if t5 else (None, None)
    pipeline = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0),
        vae=_tiny_vae(16, scaling_factor=1.5305, shift_factor=0.0609, use_quant_conv=False,
                      use_post_quant_conv=False),
        text_encoder=first, tokenizer=tokenizer, text_encoder_2=second, tokenizer_2=tokenizer,
        text_encoder_3=t5_encoder, tokenizer_3=t5_tokenizer,
    )
    pipeline.save_pretrained(folder, safe_serialization=True)  # type: ignore[attr-defined]
    write_hub_layout(folder)
    return folder


_BUILDERS: dict[str, Callable[..., Path]] = {"sd15": _sd15, "sdxl": _sdxl, "sd3": _sd3}


def _builder(family: str) -> Callable[..., Path] | None:
    """The tiny builder of `family`: one above, or the `build_tiny` of the family's own pipeline module."""
    if family in _BUILDERS:
        return _BUILDERS[family]
    module = own_module(family)
    return getattr(module, "build_tiny", None) if module is not None else None


def tiny_families() -> list[str]:
    from studio.core.families import FAMILY_NAMES

    return sorted(name for name in FAMILY_NAMES if _builder(name) is not None)


def build_tiny_pipeline(family: str, directory: str | Path, seed: int = 0, **options: Any) -> Path:
    """Write a tiny diffusers pipeline folder for `family` into `directory` and return it."""
    builder = _builder(family)
    if builder is None:
        raise ValueError(
            f"no tiny pipeline for family {family!r}; available: {', '.join(tiny_families())}"
        )
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    return builder(folder, seed, **options)


def own_module(family: str) -> Any | None:
    """The family's own pipeline module here (`flux2-klein` -> flux2_klein.py) when it builds its pipelines
    itself (`build_tiny`, `write_full_size`, `full_size_main`), else None (the families of arch_configs)."""
    import importlib

    try:
        module = importlib.import_module(f"{__package__}.{family.replace('-', '_')}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.{family.replace('-', '_')}":
            raise
        return None
    return module if hasattr(module, "full_size_main") else None
