"""Machine captions merged into a person's captions: modes, trigger word, blacklist, tag thresholds.

A captioner (run in another process) proposes a caption per image: a sentence, or for a
tagger every tag it scored above a low floor. What is written is decided here, from the
person's caption and the rules, so the Dataset page can re-decide live (a threshold moved,
a tag blacklisted) without running the model again. Pure Python: no Qt, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from studio.core.dataset.captions.caption_tags import CLIP_TOKEN_LIMIT, estimate_tokens, join_tags, split_tags

Mode = Literal["fill-missing", "append", "replace"]  # the safe one first
MODES: tuple[Mode, ...] = get_args(Mode)
MODE_HELP = {
    "fill-missing": "caption only images without a caption",
    "append": "add the machine's caption after the person's (duplicate tags merged)",
    "replace": "replace every caption (the only mode that overwrites a person's caption)",
}
TagCategory = Literal["general", "character", "rating"]
# A tagger reports every tag at or above this score, so thresholds can be lowered to it afterwards.
TAG_SCORE_FLOOR = 0.1
DEFAULT_GENERAL_THRESHOLD = 0.35
DEFAULT_CHARACTER_THRESHOLD = 0.85


@dataclass(frozen=True)
class ScoredTag:
    name: str
    score: float
    category: TagCategory = "general"


@dataclass(frozen=True)
class MachineCaption:
    """What a captioner said about one image: `text` from a captioner, `tags` from a tagger."""

    image: Path
    text: str = ""
    tags: tuple[ScoredTag, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"image": str(self.image), "text": self.text,
                "tags": [[t.name, round(t.score, 4), t.category] for t in self.tags]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MachineCaption:
        tags = tuple(ScoredTag(str(name), float(score), category) for name, score, category in data.get("tags", ()))
        return cls(Path(data["image"]), str(data.get("text", "")), tags)


@dataclass(frozen=True)
class CaptionRules:
    """How machine captions are written: the mode, the trigger word kept first, tags never written."""

    mode: Mode = "fill-missing"
    prefix: str = ""  # the trigger word (or several comma-separated tags), always first
    blacklist: frozenset[str] = field(default_factory=frozenset)
    general_threshold: float = DEFAULT_GENERAL_THRESHOLD
    character_threshold: float = DEFAULT_CHARACTER_THRESHOLD

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown caption mode {self.mode!r}; use one of {', '.join(MODES)}")
        for name in ("general_threshold", "character_threshold"):
            value = getattr(self, name)
            if not TAG_SCORE_FLOOR <= value <= 1.0:  # a tagger reports no tag scored lower than its floor
                raise ValueError(f"{name.replace('_', ' ')} {value} is not between {TAG_SCORE_FLOOR} and 1 "
                                 f"(a tagger reports the tags it scores {TAG_SCORE_FLOOR} or more)")
        object.__setattr__(self, "blacklist", frozenset(tag_key(t) for t in self.blacklist if tag_key(t)))

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "prefix": self.prefix, "blacklist": sorted(self.blacklist),
                "general_threshold": self.general_threshold, "character_threshold": self.character_threshold}


def tag_key(tag: str) -> str:
    """Tags compare case-insensitively with whitespace and underscores collapsed ("long_hair" == "Long hair")."""
    return " ".join(tag.replace("_", " ").split()).lower()


def parse_blacklist(text: str) -> frozenset[str]:
    """A comma-separated list of tags as the person typed it."""
    return frozenset(tag_key(t) for t in split_tags(text) if tag_key(t))


def tags_above(tags: Iterable[ScoredTag], rules: CaptionRules) -> list[str]:
    """The tags a tagger's scores give under the rules: characters first, then general tags by score.

    Rating tags (general, sensitive, ...) are never written into a caption.
    """
    kept = [t for t in tags if t.category != "rating" and tag_key(t.name) not in rules.blacklist and t.score >= (
        rules.character_threshold if t.category == "character" else rules.general_threshold)]
    kept.sort(key=lambda t: (t.category != "character", -t.score, t.name))
    return [t.name for t in kept]


def machine_text(caption: MachineCaption, rules: CaptionRules) -> str:
    """The machine's own caption under the rules (blacklisted tags dropped), before merging."""
    if caption.tags:
        return join_tags(tags_above(caption.tags, rules))
    parts = [p for p in split_tags(caption.text) if tag_key(p) not in rules.blacklist]
    return join_tags(parts) if "," in caption.text else (caption.text.strip() if parts else "")


def merge_tags(parts: Iterable[str]) -> list[str]:
    """Tags in order with duplicates merged (the first spelling kept)."""
    seen: set[str] = set()
    out = []
    for tag in parts:
        key = tag_key(tag)
        if key and key not in seen:
            seen.add(key)
            out.append(tag)
    return out


def compose(person: str | None, caption: MachineCaption, rules: CaptionRules) -> str | None:
    """The caption to write for one image, or None to leave the person's caption as it is.

    fill-missing keeps every caption that has text; append puts the machine's tags after the
    person's (duplicates merged); replace writes the machine's caption alone. The trigger word
    (`rules.prefix`) is moved or added first. An empty machine caption never replaces text.
    """
    person = (person or "").strip()
    machine = machine_text(caption, rules)
    if rules.mode == "fill-missing" and person:
        return None
    if not machine:
        return None
    if rules.mode == "append" and person:
        body = merge_tags([*split_tags(person), *split_tags(machine)])
    else:
        body = split_tags(machine)
    prefix = split_tags(rules.prefix)
    prefix_keys = {tag_key(t) for t in prefix}
    text = join_tags(merge_tags([*prefix, *(t for t in body if tag_key(t) not in prefix_keys)]))
    return None if text == person else text


def over_token_limit(text: str | None, limit: int = CLIP_TOKEN_LIMIT) -> bool:
    """Whether a caption is longer than the text encoder reads (`limit`: CLIP's window unless the family's
    declaration says more); the rest is cut off in training."""
    return estimate_tokens(text) > limit


# ---------------------------------------------------------------- the job's JSON lines

# `studio-train caption --json` prints one object per line on stdout; the Dataset page reads them.
EVENT_STARTED = "started"  # model, kind, device, precision, total, skipped
EVENT_CAPTION = "caption"  # a MachineCaption plus before, after, written, tokens
EVENT_PROGRESS = "progress"  # done, total
EVENT_WARNING = "warning"  # message
EVENT_FINISHED = "finished"  # status (completed | stopped | failed), counts, message


def caption_event(caption: MachineCaption, before: str | None, after: str | None, written: bool) -> dict[str, Any]:
    return {"type": EVENT_CAPTION, **caption.to_json(), "before": before, "after": after, "written": written,
            "tokens": estimate_tokens(after if after is not None else before)}
