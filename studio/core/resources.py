"""Where the studio's shipped data files live (hardware profiles, architecture sizes, icons)."""

from __future__ import annotations

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
