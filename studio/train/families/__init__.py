"""Model families: one adapter module per registered family (`<family>.py`, `flux2-klein` in `flux2_klein.py`).

Adding a family is adding a module here that defines `ADAPTER`, a
`FamilyAdapter` subclass; `adapter_for` finds it by the config's model.family.
"""

from __future__ import annotations

import importlib

from studio.core.config.schema import TrainConfig
from studio.core.families import FAMILIES
from studio.train.errors import TrainError
from studio.train.families.base import FamilyAdapter

__all__ = ["FamilyAdapter", "adapter_for"]

_FAMILIES = {spec.name: spec for spec in FAMILIES}


def adapter_for(config: TrainConfig) -> FamilyAdapter:
    family = config.model.family
    declared = _FAMILIES.get(family)
    # flux2-klein lives in flux2_klein.py; a family declared outside the studio names its home
    module_name = declared.home if declared is not None and declared.home else f"{__name__}.{family.replace('-', '_')}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise TrainError(
            "config", f"model.family = \"{family}\" cannot be trained by this version of the studio",
            "choose another model family or update the studio",
        ) from None
    adapter_class: type[FamilyAdapter] = module.ADAPTER
    return adapter_class(config)
