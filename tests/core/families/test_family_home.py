"""The family home: every fact about a family lives in its declaration, and the studio reads it from there."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from studio.core.config.schema import ModelSection, TrainConfig
from studio.core.families import FAMILIES, FAMILY_NAMES, conditional_keys, declaration_of, family
from studio.core.families.registry import UnknownFamily
from studio.core.families.settings import OFFERED, TRAINING_ADAPTER

# That no code outside a family's home names it: test_family_names.py.


def test_the_schema_allows_the_registered_families_and_names_them_when_refusing() -> None:
    assert typing.get_args(ModelSection.model_fields["family"].annotation) == FAMILY_NAMES
    with pytest.raises(ValueError, match="|".join(FAMILY_NAMES)):
        ModelSection(family="sd9", base="x")
    with pytest.raises(UnknownFamily, match="choose from " + ", ".join(FAMILY_NAMES)):
        family("sd9")


def test_every_declaration_is_complete() -> None:
    assert len(set(FAMILY_NAMES)) == len(FAMILIES)
    for spec in FAMILIES:
        assert spec.pipeline_class in spec.pipeline_classes
        assert spec.denoiser in spec.components
        assert spec.native_resolution % 64 == 0
        assert spec.fsdp_units and spec.checkpointed_blocks
        if spec.kinds:  # a family that reads single checkpoint files ships one kind's pipeline configs
            assert sum(kind.offline for kind in spec.kinds) == 1
        assert spec.methods and set(spec.methods) <= {"lora", "dreambooth"}
        assert len({s.key for s in spec.settings}) == len(spec.settings)


def test_a_conditional_setting_is_a_real_config_key_and_acts_for_someone() -> None:
    defaults = TrainConfig(model=ModelSection(family=FAMILY_NAMES[0], base="x"))
    for key in conditional_keys():
        section, name = key.split(".")
        assert hasattr(getattr(defaults, section), name), key
        assert declaration_of(key) or key in {s.key for s in OFFERED}, key


def test_an_offered_setting_is_refused_for_every_family_that_does_not_declare_it(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from studio.core.config.errors import issues_from_validation

    adapter = tmp_path / "adapter.safetensors"
    adapter.write_bytes(b"{}")
    for spec in FAMILIES:
        if spec.setting(TRAINING_ADAPTER.key) is not None:
            continue
        with pytest.raises(ValidationError) as refused:
            TrainConfig(model=ModelSection(family=spec.name, base="x", training_adapter=str(adapter)))
        (issue,) = issues_from_validation(refused.value, TrainConfig)
        assert issue.key == "model.training_adapter" and "leave it empty" in issue.message
