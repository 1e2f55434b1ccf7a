"""Weights named as the hub's own checkpoints name them, so transformers 4.x and 5.x both load them.

transformers 5 builds `CLIPTextModel` without its `text_model` level and saves it that way
unless the model came from a file in the old layout; transformers 4.x (what kohya's scripts
and many UIs still pin) cannot load such a folder or such a LoRA, while transformers 5 and
diffusers read the old layout. So every text-encoder weight the studio writes carries the
prefix: in model folders (DreamBooth outputs, the tiny models) and in LoRA files.
"""

from __future__ import annotations

import json
from pathlib import Path

# Model classes whose hub checkpoints nest every weight under a prefix that transformers 5 drops.
HUB_PREFIXES = {"CLIPTextModel": "text_model."}
INDEX_SUFFIX = ".index.json"


def text_encoder_key(key: str) -> str:
    """A CLIP text encoder's weight or LoRA key in the hub layout (text_model.encoder...)."""
    if key.startswith(("text_model.", "text_projection.")):
        return key
    return f"text_model.{key}"


def write_hub_layout(folder: Path) -> list[Path]:
    """Rename the weights of each component of the pipeline `folder` whose class lost its hub prefix;
    the files rewritten (none when every component is in the hub layout already)."""
    rewritten: list[Path] = []
    for config_file in sorted(folder.glob("*/config.json")):
        architectures = json.loads(config_file.read_text(encoding="utf-8")).get("architectures") or []
        prefix = HUB_PREFIXES.get(architectures[0]) if architectures else None
        if prefix is None:
            continue
        component = config_file.parent
        for weights in sorted(component.glob("*.safetensors")):
            if _prefix_file(weights, prefix):
                rewritten.append(weights)
        for index in sorted(component.glob(f"*.safetensors{INDEX_SUFFIX}")):
            data = json.loads(index.read_text(encoding="utf-8"))
            data["weight_map"] = {_prefixed(k, prefix): v for k, v in data.get("weight_map", {}).items()}
            index.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return rewritten


def _prefixed(key: str, prefix: str) -> str:
    return key if key.startswith(prefix) else prefix + key


def _prefix_file(path: Path, prefix: str) -> bool:
    """Rewrite one safetensors file with `prefix` on every key; False when it had it already."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(path), "pt") as handle:
        keys = list(handle.keys())
        metadata = handle.metadata() or {}
    if all(k.startswith(prefix) for k in keys):
        return False
    tensors = load_file(str(path))
    partial = path.with_name(path.name + ".partial")
    save_file({_prefixed(k, prefix): v for k, v in tensors.items()}, str(partial), metadata=metadata)
    partial.replace(path)
    return True
