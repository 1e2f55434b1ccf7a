"""Tiny random-weight pipelines built offline with the real diffusers classes (tests and the demo).

Each family builds its own in its pipeline module (`build_tiny` in `studio/train/pipelines/<family>.py`),
found here by name; the pieces several families share (a CLIP encoder, a VAE, a T5 and the
tokenizers) are below. The weights are seeded, so the same call always writes the same model; the
tokenizer is written locally and knows every word of the demo captions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.dataset.demo_shapes import CAPTION_WORDS
from studio.train.pipelines import family_module
from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS, write_tokenizer

TOKEN_LENGTH = 32


def tokenizer_folder(folder: Path) -> Path:
    """The tiny CLIP tokenizer written into folder/tokenizer: every caption and prompt word a token."""
    return write_tokenizer(folder / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], TOKEN_LENGTH)


def tiny_clip(tokenizer: Any, hidden: int, projection: bool) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, hidden_size=hidden, intermediate_size=2 * hidden,
        num_attention_heads=4, num_hidden_layers=2, vocab_size=len(tokenizer),
        max_position_embeddings=TOKEN_LENGTH, projection_dim=hidden,
    )
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(config)


def tiny_vae(latent_channels: int, **extra: Any) -> Any:
    from diffusers import AutoencoderKL

    # Four blocks: eight times smaller latents, as in the real VAEs.
    return AutoencoderKL(
        in_channels=3, out_channels=3, block_out_channels=(8, 16, 32, 32),
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        latent_channels=latent_channels, norm_num_groups=8, sample_size=64, **extra,
    )


def t5_tokenizer(folder: Path, words: list[str]) -> Any:
    """A unigram T5 tokenizer written locally into folder/tokenizer_3 (no sentencepiece model needed)."""
    import string

    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    pieces += [(f"\u2581{w}", -1.0) for w in sorted({w.lower() for w in words})]
    pieces += [(c, -3.0) for c in string.ascii_lowercase + string.digits + string.punctuation]
    T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=256).save_pretrained(folder / "tokenizer_3")
    return T5Tokenizer.from_pretrained(folder / "tokenizer_3")


def tiny_t5(folder: Path, words: list[str]) -> tuple[Any, Any]:
    """A tiny T5 encoder 96 wide (as the tiny transformers' joint attention), and its tokenizer."""
    from transformers import T5Config, T5EncoderModel

    tokenizer = t5_tokenizer(folder, words)
    encoder = T5EncoderModel(T5Config(vocab_size=len(tokenizer), d_model=96, d_kv=24, d_ff=128, num_layers=2,
                                      num_heads=4, relative_attention_num_buckets=8, pad_token_id=0,
                                      eos_token_id=1))
    return encoder, tokenizer


def _builder(family: str) -> Callable[..., Path] | None:
    """The `build_tiny` of the family's own pipeline module, or None."""
    module = family_module(family)
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
