"""The studio's sentences count and use articles as a person writes them."""

from __future__ import annotations

from studio.core.text import plural, with_article


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert [plural(n, "error") for n in (0, 1, 2)] == ["0 errors", "1 error", "2 errors"]
    assert plural(1, "image") == "1 image" and plural(3, "child", "children") == "3 children"


def test_an_before_a_vowel() -> None:
    assert with_article("orange circle") == "an orange circle" and with_article("red square") == "a red square"
