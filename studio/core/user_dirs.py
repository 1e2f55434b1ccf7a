"""The app's name and the per-user folders it keeps things in.

Each folder is an environment variable when set (tests and portable installs point
them elsewhere), else the platform's place for it (platformdirs).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "sd-training-studio"
DISPLAY_NAME = "Training Studio"


def _folder(variable: str, platform_default: str) -> Path:
    return Path(os.environ.get(variable) or platform_default)


def config_dir() -> Path:
    """Settings, the person's presets and GPU prices: $STUDIO_CONFIG_DIR, else the user config folder."""
    return _folder("STUDIO_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME, appauthor=False))


def data_dir() -> Path:
    """What the person made and would miss (the demo project, unsaved-caption recovery):
    $STUDIO_DATA_DIR, else the user data folder."""
    return _folder("STUDIO_DATA_DIR", platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """Thumbnails and model configs: $STUDIO_CACHE_DIR, else the user cache folder.

    Everything in it can be made again; deleting it loses nothing a person wrote.
    """
    return _folder("STUDIO_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def hub_cache_dir() -> Path:
    """The Hugging Face cache that other tools fill: $HF_HUB_CACHE, else $HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (as huggingface_hub does)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "huggingface" / "hub"
