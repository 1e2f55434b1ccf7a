"""The architecture of a model folder on this computer, when it is not the family's full size.

The estimate counts a family's published architecture (`resources/architectures/<family>.json`).
A diffusers folder whose weights hold far fewer parameters than that (the demo's tiny model, a
pruned or distilled model) would otherwise be estimated as the full-size one: 4.7 GB for a
model of a few megabytes. Its components' parameters are read from the safetensors headers
(a JSON header per file: no torch, no weights read), and every size that grows with the model
(LoRA targets, activations, transients) is scaled by the denoiser's share of the full size.
"""

from __future__ import annotations

import copy
import math
import re
import struct
from functools import lru_cache
from pathlib import Path
from typing import Any

from studio.core.estimate.memory_data import denoiser_entry
from studio.core.models.files import read_safetensors_header

# Weights within this share of the published count are the published architecture.
SAME_SIZE = 0.10
SCALED_KEYS = ("activations_mb", "model_copies_mb", "transients_mb")


def safetensors_params(path: Path) -> int:
    """The number of values the tensors of one safetensors file hold, read from its header."""
    return sum(math.prod(shape) for shape in read_safetensors_header(path).values())


def folder_params(folder: Path) -> int | None:
    """Parameters of one component folder (the .safetensors files a load reads); None when it has none."""
    files = _loaded_files(sorted(folder.glob("*.safetensors")))
    if not files:
        return None
    try:
        return sum(safetensors_params(f) for f in files)
    except (OSError, ValueError, KeyError, struct.error):
        return None


def _loaded_files(files: list[Path]) -> list[Path]:
    """The files of one set of weights: a clone of a hub repository keeps its variants beside the weights
    (`model.safetensors`, `model.fp16.safetensors`, `model.non_ema.safetensors`); the plain files (a sharded
    one's `-00001-of-00002` parts too) when there are any, else one variant's."""
    def variant(path: Path) -> str:
        parts = path.name.split(".")
        return re.sub(r"-\d{5}-of-\d{5}$", "", parts[-2]) if len(parts) > 2 else ""

    chosen = min((variant(f) for f in files), default="")
    return [f for f in files if variant(f) == chosen]


def local_architecture(arch: dict[str, Any], base: str) -> dict[str, Any]:
    """`arch` as it is for the model folder `base`: the same dict when `base` is not a local
    diffusers folder or its denoiser is the published size, else a scaled copy."""
    folder = Path(base)
    if not folder.is_absolute() or not (folder / "model_index.json").is_file():
        return arch
    try:
        stamp = (folder / "model_index.json").stat().st_mtime_ns
    except OSError:
        return arch
    counted = _component_params(str(folder), stamp, tuple(arch["components"]))
    return _scaled(arch, counted, folder.name)


def forget_local_architectures() -> None:
    """Count the model folders' weights again next time: the counts are remembered by the time of
    model_index.json, which a model rebuilt or copied in place may keep."""
    _component_params.cache_clear()


@lru_cache(maxsize=32)
def _component_params(folder: str, stamp: int, names: tuple[str, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    for name in names:
        params = folder_params(Path(folder) / name)
        if params is not None:
            found[name] = params
    return found


def _scaled(arch: dict[str, Any], counted: dict[str, int], model_name: str) -> dict[str, Any]:
    denoiser = denoiser_entry(arch)
    name = next(n for n, c in arch["components"].items() if c is denoiser)
    published = int(denoiser["params"])
    mine = counted.get(name)
    if not mine or abs(mine - published) <= SAME_SIZE * published:
        return arch
    ratio = mine / published
    scaled = copy.deepcopy(arch)
    for component, entry in scaled["components"].items():
        full = int(entry["params"])
        own = counted.get(component, round(full * ratio))
        share = own / full if full else ratio
        entry["params"] = own
        for key in ("encoder_params", "largest_layer_params", "float_buffers"):
            if key in entry:
                entry[key] = round(int(entry[key]) * share)
        if "quantizable" in entry:
            entry["quantizable"] = {k: round(int(v) * share) for k, v in entry["quantizable"].items()}
        targets = entry.get("lora_targets")
        if targets:  # a LoRA's size: rank x (in + out) per layer, and DoRA's magnitudes (out per layer)
            targets["in_plus_out"] = max(1, round(int(targets["in_plus_out"]) * share))
            for shape in targets.get("shapes", []):
                shape["out"] = max(1, round(int(shape["out"]) * share))
    for key in SCALED_KEYS:
        for field, value in scaled.get(key, {}).items():
            if field.endswith(("_fp32", "_fp16", "_mixed", "_bf16")) and isinstance(value, (int, float)):
                scaled[key][field] = value * ratio
    scaled["local_model"] = {"name": model_name, "denoiser_params": mine, "published_params": published}
    return scaled
