"""The settings' tooltips (their schema descriptions) name the families a setting acts for, as the
families declare it: a Z-Image user is not told that timestep sampling is an SD3 setting."""

from __future__ import annotations

import re

from studio.core.config.schema import TrainConfig
from studio.core.families import FAMILIES, conditional_keys, declaration_of

# The names a description starts with ("SD3:", "SD3 and Z-Image:"), as the docs write the families.
NAMES = {"SD1.5": "sd15", **{spec.title: spec.name for spec in FAMILIES}}


def _named_families(description: str) -> set[str] | None:
    """The families a description's "A, B and C:" opening names, or None when it names none."""
    opening = description.split(":", 1)[0]
    parts = [part.strip() for part in re.split(r",| and ", opening)]
    return {NAMES[part] for part in parts} if ":" in description and all(p in NAMES for p in parts) else None


def test_a_description_that_names_families_names_those_the_setting_acts_for() -> None:
    conditional = set(conditional_keys())
    wrong = []
    for section, field in TrainConfig.model_fields.items():
        for name, setting in getattr(field.annotation, "model_fields", {}).items():
            key = f"{section}.{name}"
            named = _named_families(setting.description or "")
            acts_for = ({spec.name for spec in declaration_of(key)} if key in conditional
                        else {spec.name for spec in FAMILIES})
            if named is not None and named != acts_for:
                wrong.append(f"{key}: says {sorted(named)}, acts for {sorted(acts_for)}")
    assert wrong == []


def test_the_openings_are_read() -> None:
    assert _named_families("SD3 and Z-Image: shift") == {"sd3", "zimage"}
    assert _named_families("SD1.5: take the text encoder's output") == {"sd15"}
    assert _named_families("Flow matching: how the timesteps are drawn.") is None
    assert _named_families("LoRA: weight-decomposed LoRA (DoRA).") is None


def test_what_a_refusal_offers_instead_acts_for_the_family_refused() -> None:
    # A FLUX.2 [klein] run refused training.shift was told to use training.noise_offset, refused in turn.
    conditional = set(conditional_keys())
    wrong = []
    for key in conditional:
        owners = declaration_of(key)
        instead = next(s for owner in owners if (s := owner.setting(key)) is not None).instead
        offered = set(re.findall(r"\b(?:model|method|dataset|training|sampling|output)\.[a-z0-9_]+", instead)) - {key}
        for spec in FAMILIES:
            if spec not in owners:
                wrong += [f"{spec.name}, {key}: offers {other}" for other in sorted(offered)
                          if other in conditional and spec not in declaration_of(other)]
    assert wrong == []
