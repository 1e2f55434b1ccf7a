"""Bulk caption operations: pure functions from {image: caption} to the edits they make.

Each returns only the captions it changes, so the list is one undoable step and an
empty list means "nothing to do". Nothing here touches the disk.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from studio.core.dataset.captions.caption_store import CaptionEdit
from studio.core.dataset.captions.caption_tags import join_tags, split_tags

Captions = Mapping[Path, str | None]
Where = Literal["start", "end"]


class TemplateError(ValueError):
    """A caption template with an unknown placeholder or a stray brace."""


def _edits(captions: Captions, change: Callable[[Path, str], str]) -> list[CaptionEdit]:
    edits = []
    for image, before in captions.items():
        after = change(image, before or "")
        if after != (before or ""):
            edits.append(CaptionEdit(image, before, after))
    return edits


def _tag_key(tag: str) -> str:
    return " ".join(tag.split()).lower()


def add_trigger(captions: Captions, word: str, where: Where = "start") -> list[CaptionEdit]:
    """Add a trigger word as a tag (at the start by default); captions that already have it are left alone."""
    word = " ".join(word.split())
    if not word:
        return []
    return add_tag(captions, word, where)


def add_text(captions: Captions, text: str, where: Where = "start") -> list[CaptionEdit]:
    """Add plain text before or after every caption (a prefix or a suffix, spaces kept as typed)."""
    if not text:
        return []
    return _edits(captions, lambda _, c: text + c if where == "start" else c + text)


def find_replace(
    captions: Captions, find: str, replace: str, regex: bool = False, case_sensitive: bool = True
) -> list[CaptionEdit]:
    """Replace text in every caption; a regex may use groups (\\1) in the replacement."""
    pattern = compile_find(find, regex, case_sensitive)
    if pattern is None:
        return []
    if regex:
        return _edits(captions, lambda _, c: pattern.sub(replace, c))
    return _edits(captions, lambda _, c: pattern.sub(lambda _m: replace, c))


def count_matches(captions: Captions, find: str, regex: bool = False, case_sensitive: bool = True) -> tuple[int, int]:
    """(matches, captions with a match): the preview shown before a find-and-replace."""
    pattern = compile_find(find, regex, case_sensitive)
    if pattern is None:
        return 0, 0
    total = hit = 0
    for caption in captions.values():
        n = len(pattern.findall(caption or ""))
        total += n
        hit += n > 0
    return total, hit


def compile_find(find: str, regex: bool, case_sensitive: bool) -> re.Pattern[str] | None:
    """The pattern to search for; raises re.error (with its position) for a bad regex."""
    if not find:
        return None
    flags = 0 if case_sensitive else re.IGNORECASE
    return re.compile(find if regex else re.escape(find), flags)


# The tag edits below change the tag asked for and leave the rest of a caption as the person wrote it: its
# lines, its spacing, the commas inside a weighted "(a, b:1.2)". Only commas and spaces at either end go.
_ENDS = re.compile(r"^[\s,]+|[\s,]+$")


def _trim(caption: str) -> str:
    return _ENDS.sub("", caption)


def add_tag(captions: Captions, tag: str, where: Where = "end") -> list[CaptionEdit]:
    tag = " ".join(tag.split())
    if not tag:
        return []

    def change(_: Path, caption: str) -> str:
        tags = split_tags(caption)
        if _tag_key(tag) in {_tag_key(t) for t in tags}:
            return caption
        if not tags:
            return tag
        return f"{tag}, {_trim(caption)}" if where == "start" else f"{_trim(caption)}, {tag}"

    return _edits(captions, change)


def remove_tag(captions: Captions, tag: str) -> list[CaptionEdit]:
    key = _tag_key(tag)
    if not key:
        return []

    def change(_: Path, caption: str) -> str:
        parts = caption.split(",")
        kept = [p for p in parts if _tag_key(p) != key]
        return caption if len(kept) == len(parts) else _trim(",".join(kept))

    return _edits(captions, change)


def rename_tag(captions: Captions, old: str, new: str) -> list[CaptionEdit]:
    """Rename a tag where it stands; when the new name is already there the old one is dropped."""
    old_key, new = _tag_key(old), " ".join(new.split())
    if not new:
        return remove_tag(captions, old)
    new_key = _tag_key(new)

    def change(_: Path, caption: str) -> str:
        parts = caption.split(",")
        if old_key not in {_tag_key(p) for p in parts}:
            return caption
        out: list[str] = []
        has_new = False
        for part in parts:
            key = _tag_key(part)
            if key == old_key:
                part, key = part[:len(part) - len(part.lstrip())] + new, new_key  # the space before it stays
            if key == new_key:
                if has_new:
                    continue
                has_new = True
            out.append(part)
        return _trim(",".join(out))

    return _edits(captions, change)


def sort_tags(captions: Captions, keep_first: int = 0) -> list[CaptionEdit]:
    """Sort tags alphabetically, keeping the first `keep_first` (e.g. the trigger word) in place."""

    def change(_: Path, caption: str) -> str:
        tags = split_tags(caption)
        if len(tags) < 2:
            return caption
        return join_tags(tags[:keep_first] + sorted(tags[keep_first:], key=_tag_key))

    return _edits(captions, change)


def clean_tags(captions: Captions) -> list[CaptionEdit]:
    """Drop duplicate and empty tags and collapse whitespace; captions without commas are only trimmed."""

    def change(_: Path, caption: str) -> str:
        if "," not in caption:
            return " ".join(caption.split())
        return join_tags(_unique(split_tags(caption)))

    return _edits(captions, change)


_PLACEHOLDERS = ("name", "folder", "caption", "index")


def from_template(captions: Captions, template: str) -> list[CaptionEdit]:
    """Set captions from a template: {name} (file name without extension, _ and - as spaces),
    {folder}, {caption} (the current caption) and {index} (1, 2, ...)."""
    for found in re.findall(r"{([^{}]*)}", template):
        if found not in _PLACEHOLDERS:
            raise TemplateError(
                f"Unknown placeholder {{{found}}} in the caption template; use {', '.join('{' + p + '}' for p in _PLACEHOLDERS)}"
            )
    index = iter(range(1, len(captions) + 1))

    def change(image: Path, caption: str) -> str:
        values = {
            "name": re.sub(r"[_-]+", " ", image.stem).strip(),
            "folder": image.parent.name,
            "caption": caption,
            "index": str(next(index)),
        }
        return re.sub(r"{(\w+)}", lambda m: values[m.group(1)], template).strip()

    return _edits(captions, change)


def _unique(tags: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for tag in tags:
        key = _tag_key(tag)
        if key not in seen:
            seen.add(key)
            out.append(tag)
    return out
