"""A tiny CLIP byte-pair tokenizer written locally: vocab.json, merges.txt, tokenizer_config.json.

Every ASCII letter, digit and punctuation mark is a token (so any English text
encodes without unknown tokens), and each word of a given list becomes a single
token through merges found by running the byte-pair algorithm until every word
collapses to one piece.
"""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import Iterable
from pathlib import Path

# Words people type in sample prompts and DreamBooth prompts, kept whole by the tiny tokenizers.
EXTRA_WORDS = ("photo", "of", "sks", "dog", "cat", "shape", "picture", "style", "an", "the", "and", "with")
BOS = "<|startoftext|>"
EOS = "<|endoftext|>"
END = "</w>"
_ALPHABET = string.ascii_lowercase + string.digits + string.punctuation


def _bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """CLIP's byte-pair encoding of one lower-case word."""
    pieces = [*word[:-1], word[-1] + END]
    while len(pieces) > 1:
        pairs = [(ranks.get((a, b)), i) for i, (a, b) in enumerate(itertools.pairwise(pieces))]
        ranked = [(r, i) for r, i in pairs if r is not None]
        if not ranked:
            break
        best = min(ranked)[0]
        merged: list[str] = []
        i = 0
        while i < len(pieces):
            if i < len(pieces) - 1 and ranks.get((pieces[i], pieces[i + 1])) == best:
                merged.append(pieces[i] + pieces[i + 1])
                i += 2
            else:
                merged.append(pieces[i])
                i += 1
        pieces = merged
    return pieces


def build_vocabulary(words: Iterable[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Token ids and merges such that each of `words` is one token."""
    tokens: list[str] = [*_ALPHABET, *(c + END for c in _ALPHABET)]
    merges: list[tuple[str, str]] = []
    ranks: dict[tuple[str, str], int] = {}
    targets = sorted({w.lower() for w in words if w.strip()})
    for _ in range(50):
        changed = False
        for word in targets:
            for _ in range(4 * len(word) + 4):
                pieces = _bpe(word, ranks)
                if len(pieces) == 1:
                    break
                pair = (pieces[0], pieces[1])
                ranks[pair] = len(merges)
                merges.append(pair)
                tokens.append(pair[0] + pair[1])
                changed = True
        if not changed:
            break
    unique = list(dict.fromkeys(tokens))
    vocab = {token: index for index, token in enumerate([*unique, BOS, EOS])}
    return vocab, merges


def write_tokenizer(folder: str | Path, words: Iterable[str], max_length: int = 77) -> Path:
    """Write a CLIP tokenizer that `CLIPTokenizer.from_pretrained(folder)` loads offline."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    vocab, merges = build_vocabulary(words)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    lines = ["#version: 0.2", *(f"{a} {b}" for a, b in merges)]
    (out / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = {
        "tokenizer_class": "CLIPTokenizer",
        "model_max_length": max_length,
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": EOS,
        "pad_token": EOS,
        "do_lower_case": True,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    special = {"bos_token": BOS, "eos_token": EOS, "unk_token": EOS, "pad_token": EOS}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2), encoding="utf-8")
    return out
