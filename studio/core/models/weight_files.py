"""A diffusers folder's weight files checked against themselves and their configs, from the headers alone.

Two mistakes end a training at load time with a library's traceback unless they are seen first: a
`.safetensors` file cut short while downloading or copying (its header names data past the file's
end), and a component's config.json that asks for more layers than its weights hold (an edited or
mismatched config: the missing layers would be random). Both are read from the files' JSON headers
(a few KB each, no weights, no torch), so the Model page, `studio-train model` and the trainer's
check before loading all see them in milliseconds.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from studio.core.models.hub_cache import UNUSED_COMPONENTS
from studio.core.models.safetensors_header import ModelFileError, safetensors_entries

# Config keys that count repeated blocks, and the weight-name prefixes whose indices they count.
LAYER_KEYS: dict[str, tuple[str, ...]] = {
    "n_layers": ("layers",),  # Z-Image's transformer
    "n_refiner_layers": ("noise_refiner", "context_refiner"),  # Z-Image's transformer
    "num_layers": ("transformer_blocks", "block"),  # SD3 and FLUX transformers; T5's encoder.block
    "num_single_layers": ("single_transformer_blocks",),  # FLUX transformers
    "num_hidden_layers": ("layers",),  # CLIP, Qwen3 text encoders
}
REDOWNLOAD = "download the model again (the file was cut off while downloading or copying)"
MISMATCH = ("the config does not match its weights: download the model again, or put back the config.json that "
            "came with these weights")


@dataclass(frozen=True)
class WeightProblem:
    """A weight file that cannot be trained from: `path` names it, `why` says what is wrong, `fix` what to do."""

    path: str
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.why}; {self.fix}"


def folder_weight_problem(folder: Path, components: Iterable[str] | None = None) -> WeightProblem | None:
    """The first cut-short weight file, or config that asks for more layers than its weights hold, among
    the component folders of a diffusers model folder (`components`: their names; default every subfolder)."""
    names = sorted(components) if components is not None else sorted(p.name for p in folder.iterdir() if p.is_dir())
    for name in names:
        problem = component_weight_problem(folder / name)
        if problem is not None:
            return problem
    return None


def weight_problem_at(path: Path) -> WeightProblem | None:
    """What is wrong with the weights at `path`: a .safetensors file, a component folder (vae/) or a diffusers
    model folder; None when nothing is seen (or `path` is none of these)."""
    if path.is_file():
        if path.suffix.lower() != ".safetensors":
            return None
        try:
            return cut_short(path, safetensors_entries(path))
        except ModelFileError as exc:
            return WeightProblem(str(path), str(exc).removesuffix("; re-download the file"), REDOWNLOAD)
    if path.is_dir():
        return component_weight_problem(path) or folder_weight_problem(path)
    return None


def component_weight_problem(component: Path) -> WeightProblem | None:
    """What is wrong with one component folder's .safetensors files (text_encoder/, transformer/...), or None."""
    files = sorted(component.glob("*.safetensors")) if component.is_dir() else []
    names: dict[str, Path] = {}
    for file in files:
        try:
            entries = safetensors_entries(file)
        except ModelFileError as exc:
            return WeightProblem(str(file), str(exc).removesuffix("; re-download the file"), REDOWNLOAD)
        problem = cut_short(file, entries)
        if problem is not None:
            return problem
        names.update(dict.fromkeys(entries, file))
    return _layer_problem(component, names) if names else None


_SHARD = re.compile(r"-\d{5}-of-\d{5}$")


def variant_only(folder: Path) -> tuple[str, str, Path] | None:
    """(component, variant, one of its files) for the first component folder of a diffusers folder that holds its
    weights only as a variant's files (`text_encoder/model.fp16.safetensors`, no `model.safetensors` beside it):
    it loads only with that model.variant. None when every component has plain weight files."""
    try:
        components = sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in UNUSED_COMPONENTS)
    except OSError:
        return None
    for component in components:
        names = sorted(p.name for p in component.iterdir() if p.name.endswith((".safetensors", ".bin")))
        # "model.safetensors", "model-00001-of-00002.safetensors": plain; "model.fp16.safetensors": a variant's.
        variants = [name for name in names if name.count(".") >= 2]
        if variants and len(variants) == len(names):
            return component.name, _SHARD.sub("", variants[0].split(".")[-2]), component / variants[0]
    return None


def cut_short(file: Path, entries: dict[str, dict[str, object]]) -> WeightProblem | None:
    """A .safetensors file whose header (`entries`) names data past the file's end: cut off while downloading."""
    expected, size = _expected_size(file, entries), file.stat().st_size
    if size >= expected:
        return None
    return WeightProblem(str(file), f"{file} is cut short: it holds {size:,} bytes, its header says {expected:,}",
                         REDOWNLOAD)


def _expected_size(file: Path, entries: dict[str, dict[str, object]]) -> int:
    """The size a complete file has: 8 bytes, the header, and the data up to its last tensor's end."""
    with open(file, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
    end = 0
    for entry in entries.values():
        offsets = entry.get("data_offsets")
        if isinstance(offsets, list) and len(offsets) == 2 and isinstance(offsets[1], int):
            end = max(end, offsets[1])
    return 8 + length + end


def _layer_problem(component: Path, names: dict[str, Path]) -> WeightProblem | None:
    config_path = component / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no config to compare (or a damaged one, which loading names itself)
    if not isinstance(config, dict):
        return None
    for key, prefixes in LAYER_KEYS.items():
        asked = config.get(key)
        if not isinstance(asked, int) or isinstance(asked, bool):
            continue
        for prefix in prefixes:
            pattern = re.compile(rf"(?:^|\.){re.escape(prefix)}\.(\d+)\.")
            found = {int(m.group(1)): file for name, file in names.items() if (m := pattern.search(name))}
            if found and asked > max(found) + 1:
                files = sorted({os.path.basename(f) for f in found.values()})
                held = max(found) + 1
                return WeightProblem(
                    str(config_path), f"{config_path} says {key} = {asked}, but its weights "
                    f"({', '.join(files)}) hold {held} ({prefix}.0 to {prefix}.{held - 1})", MISMATCH)
    return None
