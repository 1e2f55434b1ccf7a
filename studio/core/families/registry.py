"""The families the studio trains, in the order it shows them. Registering a family is one line here.

Add the family's declaration module (a `FamilySpec` named `FAMILY`, beside this file) to
`_DECLARATIONS`; everything else (the schema's allowed values, the GUI's lists, the model
detection, the estimate and the bundle) follows from it.

A family being developed outside the studio is declared the same way in a module of its own, named
in the environment before the studio starts: STUDIO_FAMILY_MODULES="package.declaration[,...]".
Its `FamilySpec.home` names the module with its trainer adapter and tiny model (the test suite's
toy family, tests/fixtures/toy_family.py, gets the family contract test this way).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

from studio.core.families import flux2_klein, qwen_image, sd3, sd15, sdxl, zimage
from studio.core.families.settings import OFFERED
from studio.core.families.spec import CheckpointKind, FamilySpec

_DECLARATIONS = (sd15, sdxl, sd3, flux2_klein, zimage, qwen_image)
OUTSIDE_ENV = "STUDIO_FAMILY_MODULES"


class FamilyDeclarationError(RuntimeError):
    """A family named in STUDIO_FAMILY_MODULES that cannot be registered; says which and why."""


def _outside(names: str, known: tuple[FamilySpec, ...]) -> tuple[FamilySpec, ...]:
    """The families declared in the modules STUDIO_FAMILY_MODULES names, checked against the others."""
    found: list[FamilySpec] = []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        try:
            module: ModuleType = importlib.import_module(name)
        except ImportError as exc:
            raise FamilyDeclarationError(f"{OUTSIDE_ENV} names {name!r}, which cannot be imported ({exc}); "
                                         f"put its folder on PYTHONPATH or remove it from {OUTSIDE_ENV}") from None
        spec = getattr(module, "FAMILY", None)
        if not isinstance(spec, FamilySpec) or not spec.home:
            raise FamilyDeclarationError(f"{name} ({OUTSIDE_ENV}) must define FAMILY, a FamilySpec whose home names "
                                         "the module with its ADAPTER and build_tiny")
        taken = {s.name for s in (*known, *found)}
        classes = {c for s in (*known, *found) for c in s.pipeline_classes}
        if spec.name in taken or classes & set(spec.pipeline_classes):
            raise FamilyDeclarationError(f"{name} ({OUTSIDE_ENV}) declares {spec.name!r} with pipeline classes "
                                         f"{', '.join(spec.pipeline_classes)}: a registered family already has that "
                                         "name or class; give it its own")
        found.append(spec)
    return tuple(found)


_OWN: tuple[FamilySpec, ...] = tuple(module.FAMILY for module in _DECLARATIONS)
FAMILIES: tuple[FamilySpec, ...] = _OWN + _outside(os.environ.get(OUTSIDE_ENV, ""), _OWN)
FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)
# New projects, the demo and the new-project wizard start from this family.
DEFAULT_FAMILY: str = FAMILIES[0].name
_BY_NAME = {f.name: f for f in FAMILIES}


class UnknownFamily(KeyError):
    """A family name the studio does not know; the message lists the ones it does."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown model family {self.name!r}; choose from {', '.join(FAMILY_NAMES)}"


def family(name: str) -> FamilySpec:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownFamily(name) from None


def is_family(name: object) -> bool:
    return isinstance(name, str) and name in _BY_NAME


def title(name: str | None) -> str:
    """What a person reads for a family name; an unknown name is shown as it is."""
    spec = _BY_NAME.get(name or "")
    return spec.title if spec else (name or "?")


def model_title(name: str | None, base: str) -> str:
    """What a person reads for a base model of a family: its edit model's name where it is one (Qwen-Image-Edit),
    else the family's."""
    spec = _BY_NAME.get(name or "")
    if spec is not None and spec.edit_model is not None and spec.edit_model(base):
        return spec.edit_title
    return title(name)


def checkpoint_kinds() -> dict[str, tuple[FamilySpec, CheckpointKind]]:
    """Every single-file kind of every family, by its name."""
    return {kind.name: (spec, kind) for spec in FAMILIES for kind in spec.kinds}


def conditional_keys() -> tuple[str, ...]:
    """The settings that act only for some families, in the order the families declare them (then the
    settings offered to them that no family may declare yet)."""
    seen: dict[str, None] = {}
    for spec in FAMILIES:
        for setting in spec.settings:
            seen.setdefault(setting.key, None)
    for setting in OFFERED:  # offered to the families, refused until one declares it
        seen.setdefault(setting.key, None)
    return tuple(seen)


def declaration_of(key: str) -> tuple[FamilySpec, ...]:
    """The families a conditional setting acts for."""
    return tuple(spec for spec in FAMILIES if spec.setting(key) is not None)


def own_sampling(name: str, base: str = "") -> dict[str, float | int]:
    """The samples' steps and guidance a config of the family (training `base`) has when it names none ({} for an
    unknown family): a step-distilled base's own (Z-Image Turbo's), else the family's."""
    if name not in _BY_NAME:
        return {}
    spec = _BY_NAME[name]
    steps, guidance = spec.sampling_of(base) or (spec.sample_steps, spec.sample_guidance)
    return {"steps": steps, "guidance": guidance}


def fill_own_sampling(sampling: Any, name: str, base: str = "") -> None:
    """Give a config's sampling section its family's (or its base model's) steps and guidance where it names none:
    guidance 7, every family's once, made FLUX.2 [klein], Z-Image and Qwen-Image samples look burnt, and Z-Image's
    28 steps at guidance 4 made Turbo's."""
    for key, own in own_sampling(name, base).items():
        if key not in sampling.model_fields_set:
            object.__setattr__(sampling, key, own)  # not an assignment to validate: the family's own value
            sampling.model_fields_set.add(key)
