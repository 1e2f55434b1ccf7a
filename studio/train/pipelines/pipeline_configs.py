"""Offline configurations for single-file checkpoints (`.safetensors` files from model sites).

A single checkpoint holds weights only. To load one, diffusers also needs the pipeline's
configs and tokenizers, which it normally downloads from the Hugging Face hub the first
time. The studio writes them itself for the kinds of checkpoint people train on most:
the published architectures, samplers and tokenizers that each family's pipeline module declares
(its `ARCHITECTURE`, `studio/train/pipelines/arch_configs.py`), and CLIP's byte-pair vocabulary (`resources/pipelines/`, the file OpenAI released with
CLIP, MIT licensed). An SD1.5, SDXL or SD3-medium checkpoint (with its CLIPs) loads with no
network. Other kinds (SD2, inpainting, the SDXL refiner, SD3.5, or SD3 with T5) still
take their configs from the hub, and the error says so when it cannot be reached.

The folders are written once into the studio's cache folder and reused.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any

from studio.core.families import family as declared
from studio.core.files import replace
from studio.core.models.files import KIND_FAMILIES, OFFLINE_KINDS, ModelInfo
from studio.core.resources import resource_path
from studio.core.user_dirs import cache_dir
from studio.train.errors import TrainError
from studio.train.pipelines.arch_configs import architecture, build_component

BPE_FILE = ("pipelines", "clip_bpe_simple_vocab_16e6.txt.gz")
CLIP_VOCAB_SIZE = 49_408
# 256 byte tokens, 256 end-of-word byte tokens, the merges, and the two special tokens.
CLIP_MERGES = CLIP_VOCAB_SIZE - 2 * 256 - 2
BOS, EOS = "<|startoftext|>", "<|endoftext|>"
# Bumped whenever what `write_config_folder` writes changes, so old cached folders are not reused.
FORMAT = 1

def single_file_config(path: Path, info: ModelInfo, family: str, use_t5: bool = False) -> Path | None:
    """The local config folder to load checkpoint `path` (of kind `info`) with, or None to take the hub's.

    Refuses a checkpoint of a kind the studio cannot train (say, an inpainting model), naming the kind.
    """
    if info.refused:
        raise TrainError("model", f"{path} is {info.a_label}, which the studio cannot train",
                         info.refused, path=str(path))
    if info.kind not in OFFLINE_KINDS or KIND_FAMILIES[info.kind] != family:
        return None
    if use_t5 and architecture(family).hub_components:  # the T5 and its tokenizer come from the hub
        return None
    return config_folder(family)


def config_folder(family: str) -> Path:
    """The folder of `family`'s pipeline configs and tokenizers, written on first use."""
    folder = cache_dir() / "pipeline-configs" / f"{family}-v{FORMAT}"
    if (folder / "model_index.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Written beside and renamed into place, so two ranks starting at once never see half a folder.
    staging = folder.parent / f".{folder.name}.{uuid.uuid4().hex[:8]}"
    try:
        write_config_folder(family, staging)
        try:
            replace(staging, folder)  # on Windows, tried again while the antivirus scans the files just written
        except OSError:
            if not (folder / "model_index.json").is_file():  # another process won the race otherwise
                raise
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    return folder


def write_config_folder(family: str, folder: Path) -> Path:
    """A diffusers pipeline folder without weights: model_index.json, every config, the tokenizers."""
    import diffusers
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    arch = architecture(family)
    index: dict[str, Any] = {"_class_name": declared(family).pipeline_class,
                             "_diffusers_version": diffusers.__version__}
    index.update({name: [None, None] for name in arch.hub_components})  # from the hub (see single_file_config)
    for name, (class_name, config, _) in arch.components.items():
        if name in arch.hub_components:
            continue
        if hasattr(diffusers, class_name) and class_name != "CLIPTextModel":
            build_component(class_name, config).save_config(folder / name)  # type: ignore[operator]
            index[name] = ["diffusers", class_name]
        else:
            text_config = transformers.CLIPTextConfig(**config, architectures=[class_name])
            text_config.save_pretrained(folder / name)
            index[name] = ["transformers", class_name]
    for name, pad in arch.tokenizers.items():
        write_clip_tokenizer(folder / name, pad_token=pad)
        index[name] = ["transformers", "CLIPTokenizer"]
    scheduler_class, scheduler_config = arch.sampler
    getattr(diffusers, scheduler_class).from_config(scheduler_config).save_config(folder / "scheduler")
    index["scheduler"] = ["diffusers", scheduler_class]
    index.update(arch.index_extras)
    (folder / "model_index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return folder


@lru_cache(maxsize=1)
def clip_vocabulary() -> tuple[dict[str, int], list[str]]:
    """CLIP's token ids and merges, made from its released BPE file as CLIP's own tokenizer makes them."""
    path = resource_path(*BPE_FILE)
    try:
        lines = gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TrainError("model", f"{path} cannot be read ({exc})", "reinstall the studio", path=str(path)) from None
    merges = lines[1:1 + CLIP_MERGES]  # the first line is the file's header
    alphabet = list(_bytes_to_unicode().values())
    tokens = [*alphabet, *(c + "</w>" for c in alphabet), *(m.replace(" ", "") for m in merges), BOS, EOS]
    return {token: index for index, token in enumerate(tokens)}, merges


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters, which CLIP's vocabulary is written in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def write_clip_tokenizer(folder: Path, pad_token: str = EOS) -> Path:
    """The full CLIP tokenizer (vocab.json, merges.txt, configs) that `CLIPTokenizer.from_pretrained` loads."""
    vocab, merges = clip_vocabulary()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("\n".join(["#version: 0.2", *merges]) + "\n", encoding="utf-8")
    special = {"bos_token": BOS, "eos_token": EOS, "unk_token": EOS, "pad_token": pad_token}
    config = {"tokenizer_class": "CLIPTokenizer", "model_max_length": 77, "do_lower_case": True,
              "clean_up_tokenization_spaces": False, **special}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")
    return folder
