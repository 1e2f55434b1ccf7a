"""Weights named as the hub's own checkpoints name them, so transformers 4.x and 5.x both load them.

transformers 5 builds `CLIPTextModel` without its `text_model` level and saves it that way
unless the model came from a file in the old layout; transformers 4.x (what kohya's scripts
and many UIs still pin) cannot load such a folder or such a LoRA, while transformers 5 and
diffusers read the old layout. So every text-encoder weight the studio writes carries the
prefix: in model folders (DreamBooth outputs, the tiny models) and in LoRA files.

Likewise transformers 5 saves a CLIP tokenizer as tokenizer.json alone, while transformers 4.x's
CLIPTokenizer (the class a pipeline's model_index.json names) reads vocab.json and merges.txt,
as the hub's folders have them; a folder gets both back from its tokenizer.json.
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
    """Rename the weights of each component of the pipeline `folder` whose class lost its hub prefix,
    and give its CLIP tokenizers their vocab.json and merges.txt; the files written (none when the
    folder is in the hub layout already)."""
    rewritten: list[Path] = write_tokenizer_files(folder)
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


def write_tokenizer_files(folder: Path) -> list[Path]:
    """Write vocab.json and merges.txt beside each CLIP tokenizer.json of the pipeline `folder` that
    lacks them; the files written."""
    written: list[Path] = []
    for config_file in sorted(folder.glob("*/tokenizer_config.json")):
        component = config_file.parent
        config = json.loads(config_file.read_text(encoding="utf-8"))
        fast = component / "tokenizer.json"
        if not str(config.get("tokenizer_class", "")).startswith("CLIPTokenizer") or not fast.is_file():
            continue
        if (component / "vocab.json").is_file() and (component / "merges.txt").is_file():
            continue
        model = json.loads(fast.read_text(encoding="utf-8"))["model"]
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        (component / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
        (component / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
        written += [component / "vocab.json", component / "merges.txt"]
    return written


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
