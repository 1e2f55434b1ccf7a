"""Where the studio's shipped data files live (hardware profiles, architecture sizes, icons)."""

from __future__ import annotations

import os
from pathlib import Path

# The package is installed editable (or frozen with resources/ beside it), so the
# folder sits next to the `studio` package at the repository root.
_ROOT = Path(__file__).resolve().parents[2]


def resources_dir() -> Path:
    """The top-level `resources/` folder."""
    return _ROOT / "resources"


def resource_path(*parts: str) -> Path:
    """A path inside `resources/`; it may not exist (callers say what is missing)."""
    return resources_dir().joinpath(*parts)


def cache_root() -> Path:
    """The studio's cache folder (thumbnails, model configs): $STUDIO_CACHE_DIR, else the user cache dir.

    Everything in it can be made again; deleting it loses nothing a person wrote.
    """
    root = os.environ.get("STUDIO_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("sd-training-studio", appauthor=False)
    return Path(root)
