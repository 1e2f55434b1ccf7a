"""Comma-separated tags inside a caption, tag counts and a caption length estimate."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from studio.core.families.spec import CLIP_TOKEN_LIMIT

__all__ = ["CLIP_TOKEN_LIMIT", "estimate_tokens", "join_tags", "split_tags", "tag_counts"]

_SPACES = re.compile(r"\s+")
# CLIP's byte-pair tokenizer keeps common words whole, splits digits one by one and
# makes every punctuation mark its own token; long or rare words cost about one token
# per five letters. This estimate is within a few tokens on typical captions.
_TOKEN_PIECES = re.compile(r"[^\W\d_]+|\d|[^\w\s]", re.UNICODE)


def split_tags(caption: str | None) -> list[str]:
    """The comma-separated tags of a caption, whitespace collapsed, empty tags dropped."""
    if not caption:
        return []
    tags = (_SPACES.sub(" ", part).strip() for part in caption.split(","))
    return [t for t in tags if t]


def join_tags(tags: Iterable[str]) -> str:
    return ", ".join(t for t in (_SPACES.sub(" ", tag).strip() for tag in tags) if t)


def tag_counts(captions: Iterable[str | None]) -> Counter[str]:
    """How many captions hold each tag (a tag repeated inside one caption counts once)."""
    counts: Counter[str] = Counter()
    for caption in captions:
        counts.update(set(split_tags(caption)))
    return counts


def estimate_tokens(text: str | None) -> int:
    """An estimate of the CLIP tokens of a caption (without the start/end markers)."""
    if not text:
        return 0
    total = 0
    for piece in _TOKEN_PIECES.findall(text.lower()):
        total += 1 if len(piece) <= 7 else (len(piece) + 4) // 5
    return total
