"""Pickle model files (.ckpt, .pt, .pth, .bin): one answer for the whole studio.

Loading a pickle can run code hidden in it, so a base model or VAE in one of these formats is
refused unless the config says `model.allow_pickle = true`; even then it is read as data only
(torch's weights-only loader, as the trainer reads its own checkpoints), and the run warns.
`pickle_refusal` is the message every place gives: validation, `studio-train model`, the
pre-flight check and the Model page.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from studio.core.app_words import cli_command
from studio.core.config.errors import Contradiction

PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin")


def is_pickle_file(base: str) -> bool:
    """Whether a model path names a pickle file by its suffix (a hub id or folder never does)."""
    return PurePath(base.strip()).suffix.lower() in PICKLE_SUFFIXES


def pickle_refusal(base: str) -> str:
    """Why a pickle model is not loaded, and the two ways on."""
    name = PurePath(base).name
    return (f"{name} is a pickle file ({PurePath(base).suffix}): loading one can run code hidden in it, so the "
            f"studio does not load it by default. Convert it once to .safetensors "
            f"({cli_command(['model', name, '--to-safetensors'])}, which "
            "reads it as data only) and use that file, or set model.allow_pickle = true to load it as data only "
            "(torch's weights-only loader) at your own risk")



def pickle_warning(base: str) -> str:
    """What a run that loads a pickle model says (model.allow_pickle = true)."""
    return (f"{PurePath(base).name} is a pickle file, loaded as data only because model.allow_pickle = true; "
            "convert it to .safetensors to be sure no code in it can run")


def check_pickle(config: Any) -> None:
    """A pickle model file can run code when loaded: refused unless the config allows it explicitly."""
    model = config.model
    for key, value in (("model.base", model.base), ("model.vae", model.vae),
                       ("model.training_adapter", model.training_adapter)):
        if value and is_pickle_file(value) and not model.allow_pickle:
            raise Contradiction(key, value, pickle_refusal(value))
