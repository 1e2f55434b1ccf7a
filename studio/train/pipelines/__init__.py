"""Pipeline builders: one module per family (`<family>.py`, `flux2-klein` in `flux2_klein.py`) and the
shared builders that find it by the family's name."""

from __future__ import annotations

import importlib
from types import ModuleType


def family_module(family: str) -> ModuleType | None:
    """The family's own pipeline module here (or its declared home outside the studio), or None when it has none."""
    from studio.core.families import FAMILIES

    home = next((spec.home for spec in FAMILIES if spec.name == family and spec.home), "")
    name = home or f"{__name__}.{family.replace('-', '_')}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None
