"""Counts and articles in the studio's sentences: "1 error", "2 errors", "an orange circle"."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`count` with its noun, singular for exactly one."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"


def with_article(phrase: str) -> str:
    """"a" or "an" before `phrase`, by its first letter (enough for the studio's own words)."""
    return f"{'an' if phrase[:1].lower() in 'aeiou' and phrase else 'a'} {phrase}"


def size_text(count: float) -> str:
    """A file's bytes as a person reads them: "12 KB", "24 MB", "1.5 GB" (never "0.0 GB" for a tiny model)."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}" if unit == "GB" else f"{count / scale:,.0f} {unit}"
    return f"{max(count, 0) / 1024:,.0f} KB"


def memory_text(mb: float) -> str:
    """Memory in MB (an estimate's part, a total) as a person reads it: "350 MB" below a gigabyte, "6.5 GB"."""
    return f"{mb:,.0f} MB" if mb < 1024 else f"{mb / 1024:,.1f} GB"
