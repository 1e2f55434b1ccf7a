"""Whether a model folder's tokenizers have their vocabulary, from the files alone (no torch, no transformers).

A tokenizer folder that lost its vocabulary (tokenizer.json, or vocab.json with merges.txt) still loads:
transformers builds a tokenizer of two special tokens from the rest, every caption encodes as nothing, and a
run trains on empty prompts without a word. This names the file that is missing or empty and the fix, so
`studio-train model`, the studio's model check and the trainer refuse such a folder before loading it.
Real vocabularies are files of hundreds of KB; only small files are opened to count their tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

MIN_TOKENS = 50  # a real vocabulary holds tens of thousands; the tiny test ones 99 (T5) to 368 (Qwen)
_COUNT_BELOW_BYTES = 64 * 1024  # files this small are opened and their tokens counted
# The files a tokenizer class can read its vocabulary from, besides tokenizer.json (any class reads that).
_SLOW_FILES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("CLIPTokenizer", "Qwen2Tokenizer", "GPT2Tokenizer", "RobertaTokenizer"), ("vocab.json", "merges.txt")),
    (("T5Tokenizer", "MT5Tokenizer", "UMT5Tokenizer"), ("spiece.model",)),
    (("LlamaTokenizer", "GemmaTokenizer"), ("tokenizer.model",)),
    (("BertTokenizer",), ("vocab.txt",)),
)


def slow_files(class_name: str) -> tuple[str, ...]:
    """The vocabulary files of `class_name` other than tokenizer.json (() for a class not listed)."""
    base = class_name.removesuffix("Fast")
    return next((files for classes, files in _SLOW_FILES if base in classes), ())


def token_count(path: Path) -> int | None:
    """The number of tokens in a small vocabulary file (tokenizer.json or vocab.json); None when it is large
    (a real vocabulary) or not one this reads."""
    try:
        if path.stat().st_size >= _COUNT_BELOW_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0  # unreadable or not JSON: no vocabulary in it
    if path.name == "tokenizer.json":
        vocab = data.get("model", {}).get("vocab") if isinstance(data, dict) and isinstance(data.get("model"), dict) \
            else None
        added = data.get("added_tokens") if isinstance(data, dict) else None
        return (len(vocab) if isinstance(vocab, dict | list) else 0) + (len(added) if isinstance(added, list) else 0)
    return len(data) if isinstance(data, dict) else 0


def _file_state(path: Path) -> str | None:
    """None when `path` holds a vocabulary; else what is wrong with it ("is missing", "is empty", ...)."""
    try:
        size = path.stat().st_size
    except OSError:
        return "is missing"
    if size == 0:
        return "is empty"
    if path.suffix == ".json":
        count = token_count(path)
        if count is not None and count < MIN_TOKENS:
            return f"holds {count} tokens only"
    return None


def tokenizer_folder_problem(component: Path, class_name: str) -> str | None:
    """Why the tokenizer folder `component` (of class `class_name`) has no usable vocabulary, or None."""
    fast = _file_state(component / "tokenizer.json")
    if fast is None:
        return None
    slow = slow_files(class_name)
    states = {name: _file_state(component / name) for name in slow}
    if slow and all(state is None for state in states.values()):
        return None
    alternative = f", or {' with '.join(slow)}" if slow else ""
    wrong = [f"tokenizer.json {fast}"] + [f"{name} {state}" for name, state in states.items() if state]
    # Half of the other set there (vocab.json without merges.txt): its missing half is the file to bring back.
    fix = next((name for name, state in states.items() if state), "") if any(
        state is None for state in states.values()) else "tokenizer.json"
    return (f"its tokenizer folder {component} has no vocabulary ({', '.join(wrong)}; it reads tokenizer.json"
            f"{alternative}): loaded so, the tokenizer knows almost no tokens and every caption trains as an "
            f"empty prompt; copy {fix} from the model's download into that folder, or download the model again")


def tokenizer_problem(folder: Path, index: dict[str, object]) -> str | None:
    """The first tokenizer of the pipeline `folder` (its model_index.json `index`) without a vocabulary, or
    None. A tokenizer folder that is not there is left to the component checks (SD3's T5 one is optional),
    except the first, `tokenizer`, that every family reads."""
    for name in sorted(index):
        entry = index[name]
        if not name.startswith("tokenizer") or not (isinstance(entry, list) and len(entry) == 2 and entry[1]):
            continue
        component = folder / name
        if not component.is_dir():
            if name == "tokenizer":
                return (f"its tokenizer folder {component} is missing: copy it from the model's download, or "
                        "download the model again")
            continue
        problem = tokenizer_folder_problem(component, str(entry[1]))
        if problem is not None:
            return problem
    return None
