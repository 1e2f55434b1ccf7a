"""Tiny random-weight pipelines built offline with the real diffusers classes (tests and the demo).

Each family builds its own in its pipeline module (`build_tiny` in `studio/train/pipelines/<family>.py`),
found here by name; the pieces several families share (a CLIP encoder, a VAE, a T5 and the
tokenizers) are below. The weights are seeded, so the same call always writes the same model; the
tokenizer is written locally and knows every word of the demo captions.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.dataset.demo_shapes import CAPTION_WORDS
from studio.train.pipelines import family_module
from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS, write_tokenizer

TOKEN_LENGTH = 32
# Written first into every folder the studio builds a random-weight model in: such a folder (a build
# stopped halfway too) is built again from nothing, while a folder holding anything else (a downloaded
# model, a project) is never written into unless the person says so.
RANDOM_WEIGHTS_MARKER = ".studio-random-weights"
# What a file manager leaves in a folder it only showed: the folder is still empty to its owner.
_FILE_MANAGER_FILES = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})


class FolderInUseError(ValueError):
    """The folder given for a random-weight model holds files the studio did not write; the message says what to do."""


def check_model_folder(directory: str | Path, force: bool = False) -> None:
    """Raise FolderInUseError when `directory` may not take a random-weight model: a file, or a folder with
    files in it that the studio did not build (unless `force`)."""
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise FolderInUseError(f"{folder} is a file, not a folder: give a new folder for the model")
    if force or not folder.is_dir() or (folder / RANDOM_WEIGHTS_MARKER).is_file() or \
            all(child.name in _FILE_MANAGER_FILES for child in folder.iterdir()):
        return
    raise FolderInUseError(
        f"{folder} is not empty and is not a model the studio built, so random weights would be written over "
        "what is there (a downloaded model's weights too): give a new or empty folder, or add --force to "
        "write into it anyway")


def prepare_model_folder(directory: str | Path, force: bool = False) -> Path:
    """The folder a random-weight model is written into, checked (`check_model_folder`), emptied when it holds
    one the studio built before, and marked as the studio's."""
    folder = Path(directory)
    check_model_folder(folder, force)
    if (folder / RANDOM_WEIGHTS_MARKER).is_file():
        for child in folder.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RANDOM_WEIGHTS_MARKER).write_text(
        "A model with random weights, built by the studio (studio-train tiny): building one here again "
        "replaces this folder's files.\n", encoding="utf-8")
    return folder


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


def build_tiny_pipeline(family: str, directory: str | Path, seed: int = 0, force: bool = False,
                        **options: Any) -> Path:
    """Write a tiny diffusers pipeline folder for `family` into `directory` and return it (a folder in use is
    refused: see `check_model_folder`)."""
    builder = _builder(family)
    if builder is None:
        raise ValueError(
            f"no tiny pipeline for family {family!r}; available: {', '.join(tiny_families())}"
        )
    return builder(prepare_model_folder(directory, force), seed, **options)
