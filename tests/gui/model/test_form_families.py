"""The settings form hides each family's settings from the others, as the family declarations say."""

from __future__ import annotations

from studio.core.families import FAMILIES, conditional_keys
from studio.gui.model.form import FAMILY_ONLY


def test_the_form_reads_the_declarations_table() -> None:
    assert set(FAMILY_ONLY) == set(conditional_keys())
    for key, names in FAMILY_ONLY.items():
        assert names == tuple(spec.name for spec in FAMILIES if spec.setting(key) is not None)
    assert FAMILY_ONLY["training.noise_offset"] == tuple(s.name for s in FAMILIES if s.objective == "ddpm")
