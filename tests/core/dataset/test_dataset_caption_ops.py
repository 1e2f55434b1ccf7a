from __future__ import annotations

import re
from pathlib import Path

import pytest

from studio.core.dataset.captions import caption_ops as ops
from studio.core.dataset.captions.caption_store import CaptionEdit
from studio.core.dataset.captions.caption_tags import estimate_tokens, join_tags, split_tags, tag_counts

A, B, C = Path("/d/a_red-car.png"), Path("/d/b.png"), Path("/d/sub/c.png")


def after(edits: list[CaptionEdit]) -> dict[Path, str | None]:
    return {e.image: e.after for e in edits}


def test_split_and_join_tags() -> None:
    assert split_tags(" red  car,, blue ,\nsky ") == ["red car", "blue", "sky"]
    assert split_tags(None) == [] and split_tags("") == []
    assert join_tags(["a", " ", "b  c"]) == "a, b c"


def test_add_trigger_skips_captions_that_have_it() -> None:
    edits = ops.add_trigger({A: "photo, red", B: "sks, photo", C: None}, "sks")
    assert after(edits) == {A: "sks, photo, red", C: "sks"}
    assert edits[1].before is None
    assert after(ops.add_trigger({A: "x"}, "sks", where="end")) == {A: "x, sks"}
    assert ops.add_trigger({A: "x"}, "  ") == []


def test_add_text_prefix_suffix() -> None:
    assert after(ops.add_text({A: "a dog", B: None}, "photo of ")) == {A: "photo of a dog", B: "photo of "}
    assert after(ops.add_text({A: "a dog"}, ", 4k", where="end")) == {A: "a dog, 4k"}


def test_find_replace_plain_and_regex() -> None:
    caps = {A: "a cat and a cat", B: "A Cat", C: "dog"}
    assert after(ops.find_replace(caps, "cat", "dog")) == {A: "a dog and a dog"}
    assert after(ops.find_replace(caps, "cat", "dog", case_sensitive=False)) == {A: "a dog and a dog", B: "A dog"}
    assert after(ops.find_replace(caps, r"a (\w+)", r"the \1", regex=True)) == {A: "the cat and the cat"}
    assert after(ops.find_replace({A: "1+1"}, "+", r"\n")) == {A: r"1\n1"}  # plain text stays literal
    assert ops.count_matches(caps, "cat") == (2, 1)
    assert ops.count_matches(caps, "CAT", case_sensitive=False) == (3, 2)
    with pytest.raises(re.error):
        ops.find_replace(caps, "(", "x", regex=True)


def test_tag_add_remove_rename() -> None:
    caps = {A: "red, car", B: "car, Red , blue", C: ""}
    assert after(ops.add_tag(caps, "blue")) == {A: "red, car, blue", C: "blue"}
    assert after(ops.remove_tag(caps, "red")) == {A: "car", B: "car, blue"}
    assert after(ops.rename_tag(caps, "red", "crimson")) == {A: "crimson, car", B: "car, crimson, blue"}
    assert after(ops.rename_tag({A: "red, crimson"}, "red", "crimson")) == {A: "crimson"}


def test_tag_edits_change_only_the_tag() -> None:
    """Adding a trigger word rejoined every caption from its tags: a caption's lines ran into one, and its own
    spacing and weights' commas were redone. Adding, removing and renaming a tag leave the rest as written."""
    caption = "a photo of a dog.\nThe dog is brown, sitting on (grass,blue sky:1.2)"
    assert after(ops.add_trigger({A: caption}, "sks")) == {A: "sks, " + caption}
    assert after(ops.add_tag({A: caption}, "dog")) == {A: caption + ", dog"}
    assert after(ops.add_tag({A: "red, car,\n"}, "blue")) == {A: "red, car, blue"}
    assert after(ops.remove_tag({A: "sks, " + caption}, "SKS")) == {A: caption}
    assert after(ops.remove_tag({A: "one,two ,  three\nfour"}, "two")) == {A: "one,  three\nfour"}
    assert after(ops.rename_tag({A: "x,  old,\ny, x"}, "old", "new")) == {A: "x,  new,\ny, x"}
    assert ops.remove_tag({A: "a,,b"}, " ") == []


def test_sort_and_clean() -> None:
    assert after(ops.sort_tags({A: "sks, zebra, apple", B: "one"}, keep_first=1)) == {A: "sks, apple, zebra"}
    assert after(ops.clean_tags({A: "a,  b , a,,b", B: "  plain   text ", C: "ok, fine"})) == {A: "a, b", B: "plain text"}


def test_template() -> None:
    caps = {A: "old", B: None}
    assert after(ops.from_template(caps, "photo of {name}, {caption} #{index} in {folder}")) == {
        A: "photo of a red car, old #1 in d", B: "photo of b,  #2 in d"}
    with pytest.raises(ops.TemplateError, match=r"\{nme\}"):
        ops.from_template(caps, "{nme}")


def test_edit_inverse() -> None:
    edit = CaptionEdit(A, "x", "y")
    assert edit.inverse() == CaptionEdit(A, "y", "x")


def test_tag_counts_and_tokens() -> None:
    counts = tag_counts(["red, car, red", "car", None])
    assert counts == {"red": 1, "car": 2}
    assert estimate_tokens("") == 0
    assert estimate_tokens("a photo of a dog, 1girl") == 8
    assert estimate_tokens(", ".join(["word"] * 40)) > 75
