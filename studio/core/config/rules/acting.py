"""Whether each setting acts for a config: the family declarations' tables, asked of a config.

A setting that does not act (another family's, another method's, or one that needs another
setting it lacks) is refused by validation with the key, the family and what to use instead,
so a TOML file, a preset or the command line trains what it says. The GUI form hides what does
not act and puts it back to its default when a change makes it stop acting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from pydantic import BaseModel

from studio.core.families import FamilySpec, Setting, conditional_keys, declaration_of, family, own_sampling
from studio.core.families.settings import OFFERED

Value = Callable[[str], Any]
_OBJECTIVES = {"ddpm": "a DDPM noise schedule", "flow_matching": "flow matching"}


def value_of(config: BaseModel, key: str) -> Any:
    section, name = key.split(".", 1)
    return getattr(getattr(config, section), name)


def default_of(config: BaseModel, key: str) -> Any:
    section, name = key.split(".", 1)
    field = type(getattr(config, section)).model_fields[name]
    if field.default_factory is not None:
        # The schema's factories take no arguments; pydantic's get_default would inspect the
        # factory's signature on every call, most of what the Model page spent here.
        return cast(Callable[[], Any], field.default_factory)()
    return field.get_default()


def why_inert(value: Value, key: str) -> str | None:
    """Why `key` does not act with the settings `value` gives, or None when it acts (or acts everywhere)."""
    spec = family(str(value("model.family")))
    setting = spec.setting(key)
    if setting is None:
        owners = declaration_of(key)
        if not owners:
            offered = next((s for s in OFFERED if s.key == key), None)
            return None if offered is None else f"{offered.does}, which no family acts on: {offered.instead}"
        declared = next(s for owner in owners if (s := owner.setting(key)) is not None)
        return _other_family(spec, declared, owners)
    kind = value("method.kind")
    if setting.methods and kind not in setting.methods:
        return (f"{setting.does}, which acts only for method.kind = {' or '.join(setting.methods)}, "
                f"not {kind}: {setting.instead}")
    for condition in setting.needs:
        if value(condition.key) not in condition.values:
            return f"{setting.does}, which acts only with {condition.describe()}; set that, or leave {key} at its default"
    return None


def _other_family(spec: FamilySpec, setting: Setting, owners: tuple[FamilySpec, ...]) -> str:
    names = ", ".join(owner.name for owner in owners)
    return (f"{setting.does}, which acts only for family {names}; {spec.name} ({spec.title}, trained by "
            f"{_OBJECTIVES[spec.objective]}) does not use it: {setting.instead}")


def inert_settings(config: BaseModel) -> list[tuple[str, Any, str]]:
    """(key, value, why) of every setting changed from its default that does not act for `config`."""
    found = []
    for key in conditional_keys():
        current = value_of(config, key)
        if current == default_of(config, key):
            continue
        why = why_inert(lambda k: value_of(config, k), key)
        if why is not None:
            found.append((key, current, why))
    return found


def resets_for(config: BaseModel, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that go back to their defaults when `changes` are made: those that would stop acting, and,
    when the family changes, the separate VAE, and when the family or a base model sampled otherwise (Z-Image
    Turbo) changes, the samples' steps and guidance the old one had."""
    def value(key: str) -> Any:
        return changes[key] if key in changes else value_of(config, key)

    out: dict[str, Any] = {}
    for key in conditional_keys():
        if key in changes or value(key) == default_of(config, key):
            continue
        if why_inert(value, key) is not None:
            out[key] = default_of(config, key)
    # A separate VAE is its family's (an SDXL VAE's latents are not SD3's): it stays with the old family.
    other_family = value("model.family") != value_of(config, "model.family")
    if other_family and "model.vae" not in changes and value_of(config, "model.vae") is not None:
        out["model.vae"] = None
    # The samples' steps and guidance left at the old family's (or base model's) own become the new one's.
    old = own_sampling(str(value_of(config, "model.family")), str(value_of(config, "model.base")))
    new = own_sampling(str(value("model.family")), str(value("model.base")))
    if other_family or old != new:
        for key, name in (("sampling.steps", "steps"), ("sampling.guidance", "guidance")):
            if key not in changes and value_of(config, key) in (old[name], default_of(config, key)):
                out[key] = new[name]
    return out


def acts(config: BaseModel, key: str) -> bool:
    return why_inert(lambda k: value_of(config, k), key) is None
