"""Counts and articles in the studio's sentences: "1 error", "2 errors", "an orange circle"."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`count` with its noun, singular for exactly one."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"


def with_article(phrase: str) -> str:
    """"a" or "an" before `phrase`, by its first letter (enough for the studio's own words)."""
    return f"{'an' if phrase[:1].lower() in 'aeiou' and phrase else 'a'} {phrase}"
