"""Model families as data: one declaration per family, read by the whole studio (see registry.py)."""

from __future__ import annotations

from studio.core.families.registry import (
    DEFAULT_FAMILY,
    FAMILIES,
    FAMILY_NAMES,
    UnknownFamily,
    checkpoint_kinds,
    conditional_keys,
    declaration_of,
    family,
    fill_own_sampling,
    is_family,
    model_title,
    own_sampling,
    title,
)
from studio.core.families.spec import CheckpointKind, Condition, FamilySpec, Objective, Setting

__all__ = [
    "DEFAULT_FAMILY", "FAMILIES", "FAMILY_NAMES", "CheckpointKind", "Condition", "FamilySpec", "Objective",
    "Setting", "UnknownFamily", "checkpoint_kinds", "conditional_keys", "declaration_of", "family",
    "fill_own_sampling", "is_family", "model_title", "own_sampling", "title",
]
