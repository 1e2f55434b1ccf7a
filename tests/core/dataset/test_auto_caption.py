"""Machine captions merged into a person's captions: modes, trigger word, blacklist, thresholds, lookup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.core.dataset.captions.auto_caption import (
    CaptionRules,
    MachineCaption,
    ScoredTag,
    caption_event,
    compose,
    over_token_limit,
    parse_blacklist,
    tags_above,
)
from studio.core.dataset.captions.captioner_models import (
    CaptionerNotFound,
    available_captioners,
    captioners_dir,
    find_captioner,
)

IMAGE = Path("/data/a.png")
TAGS = MachineCaption(IMAGE, tags=(
    ScoredTag("1girl", 0.98), ScoredTag("long hair", 0.7), ScoredTag("solo", 0.4), ScoredTag("smile", 0.2),
    ScoredTag("hatsune miku", 0.9, "character"), ScoredTag("other girl", 0.6, "character"),
    ScoredTag("general", 0.95, "rating"),
))
SENTENCE = MachineCaption(IMAGE, "a woman with long hair standing in a field")


def test_fill_missing_writes_only_where_there_is_no_caption() -> None:
    rules = CaptionRules("fill-missing")
    assert compose("my own words", SENTENCE, rules) is None
    assert compose(None, SENTENCE, rules) == "a woman with long hair standing in a field"
    assert compose("  ", SENTENCE, rules) == "a woman with long hair standing in a field"


def test_tags_are_characters_first_then_by_score_above_their_thresholds_and_never_ratings() -> None:
    assert compose(None, TAGS, CaptionRules("replace")) == "hatsune miku, 1girl, long hair, solo"
    lowered = CaptionRules("replace", general_threshold=0.1, character_threshold=0.5)
    assert compose(None, TAGS, lowered) == "hatsune miku, other girl, 1girl, long hair, solo, smile"
    assert tags_above(TAGS.tags, CaptionRules(general_threshold=0.8)) == ["hatsune miku", "1girl"]


def test_append_merges_duplicate_tags_with_the_persons_and_keeps_their_order() -> None:
    person = "sks, Long_Hair, outdoors"
    assert compose(person, TAGS, CaptionRules("append")) == "sks, Long_Hair, outdoors, hatsune miku, 1girl, solo"
    assert compose("1girl, long hair, solo, hatsune miku", TAGS, CaptionRules("append")) is None  # nothing new


def test_replace_overwrites_and_the_trigger_word_is_kept_first() -> None:
    rules = CaptionRules("replace", prefix="sks")
    assert compose("old caption", SENTENCE, rules) == "sks, a woman with long hair standing in a field"
    moved = CaptionRules("append", prefix="solo")
    assert compose("outdoors", TAGS, moved) == "solo, outdoors, hatsune miku, 1girl, long hair"
    several = CaptionRules("fill-missing", prefix="sks style, 1girl")
    assert compose(None, TAGS, several) == "sks style, 1girl, hatsune miku, long hair, solo"


def test_blacklisted_tags_are_never_written_but_the_persons_text_is_kept() -> None:
    rules = CaptionRules("append", blacklist=parse_blacklist("Solo, long_hair"))
    assert compose("solo, beach", TAGS, rules) == "solo, beach, hatsune miku, 1girl"
    assert compose(None, MachineCaption(IMAGE, "solo"), CaptionRules("replace", blacklist=frozenset({"solo"}))) is None


def test_an_empty_machine_caption_never_replaces_text() -> None:
    empty = MachineCaption(IMAGE, "")
    assert compose("keep me", empty, CaptionRules("replace")) is None
    assert compose(None, empty, CaptionRules("fill-missing", prefix="sks")) is None


def test_rules_reject_bad_values_with_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="fill-missing"):
        CaptionRules("overwrite")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"general threshold 1.5 is not between 0.1 and 1"):
        CaptionRules(general_threshold=1.5)
    with pytest.raises(ValueError, match=r"character threshold 0.05 is not between 0.1 and 1 \(a tagger reports the "
                                         r"tags it scores 0.1 or more\)"):
        CaptionRules(character_threshold=0.05)  # it would write the tags scored 0.1 or more and no others


def test_the_event_line_round_trips_and_counts_tokens() -> None:
    event = json.loads(json.dumps(caption_event(TAGS, "old", "old, 1girl", True)))
    assert MachineCaption.from_json(event) == MachineCaption(IMAGE, "", tuple(
        ScoredTag(t.name, round(t.score, 4), t.category) for t in TAGS.tags))
    assert event["written"] is True and event["tokens"] == 4  # old , 1 girl
    assert over_token_limit(", ".join(f"tag{i}" for i in range(40)))
    assert not over_token_limit("a short caption")


def test_a_model_folder_is_recognised_by_its_files(tmp_path: Path) -> None:
    tagger = tmp_path / "my-tagger"
    tagger.mkdir()
    (tagger / "model.onnx").write_bytes(b"x")
    with pytest.raises(CaptionerNotFound, match=r"lacks selected_tags.csv"):
        find_captioner(str(tagger))
    (tagger / "selected_tags.csv").write_text("tag_id,name,category,count\n", encoding="utf-8")
    assert find_captioner(str(tagger)).kind == "wd14"
    blip = tmp_path / "blip"
    blip.mkdir()
    (blip / "config.json").write_text('{"model_type": "blip"}', encoding="utf-8")
    for name in ("model.safetensors", "preprocessor_config.json"):
        (blip / name).write_text("{}", encoding="utf-8")
    assert find_captioner(str(blip)).kind == "blip"
    (blip / "config.json").write_text('{"model_type": "clip"}', encoding="utf-8")
    with pytest.raises(CaptionerNotFound, match="holds no captioning model"):
        find_captioner(str(blip))


def test_a_known_name_is_looked_up_where_downloads_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(CaptionerNotFound, match=r"blip-base is not downloaded .*Salesforce/blip-image-captioning-base"):
        find_captioner("blip-base")
    with pytest.raises(CaptionerNotFound, match=r"not a folder and not a known model name.*wd14-vit-v3"):
        find_captioner("no-such-model")
    folder = captioners_dir() / "wd14-vit-v3"
    folder.mkdir(parents=True)
    for name in ("model.onnx", "selected_tags.csv"):
        (folder / name).write_text("x", encoding="utf-8")
    found = find_captioner("wd14-vit-v3")
    assert (found.folder, found.kind, found.name) == (folder.resolve(), "wd14", "wd14-vit-v3")
    snapshot = tmp_path / "hub" / "models--Salesforce--blip-image-captioning-base" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc", encoding="utf-8")
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        (snapshot / name).write_text("{}", encoding="utf-8")
    assert find_captioner("blip-base").folder == snapshot.resolve()
    assert available_captioners() == ["blip-base", "wd14-vit-v3"]


def test_a_cached_ref_naming_a_folder_outside_the_cache_loads_no_captioner_from_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """refs/main is written from a server's answer: one that climbs out of snapshots/ ("../../..") names no
    download, and the captioning model is not loaded from whatever folder it reaches."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        (elsewhere / name).write_text("{}", encoding="utf-8")
    repo = tmp_path / "hub" / "models--Salesforce--blip-image-captioning-base"
    (repo / "refs").mkdir(parents=True)
    (repo / "snapshots").mkdir()
    for ref in ("../../../elsewhere", str(elsewhere)):
        (repo / "refs" / "main").write_text(ref, encoding="utf-8")
        with pytest.raises(CaptionerNotFound, match="blip-base is not downloaded"):
            find_captioner("blip-base")
        assert "blip-base" not in available_captioners()


def test_a_captioner_downloaded_by_another_tool_under_xdg_cache_home_is_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub puts its cache under $XDG_CACHE_HOME when that is set and HF_HOME is not; a captioner
    another tool downloaded there was "not downloaded" to the studio (it looked in ~/.cache only)."""
    for name in ("HF_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    repo = tmp_path / "xdg-cache" / "huggingface" / "hub" / "models--Salesforce--blip-image-captioning-base"
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc", encoding="utf-8")
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        (repo / "snapshots" / "abc" / name).write_text("{}", encoding="utf-8")
    assert find_captioner("blip-base").folder == (repo / "snapshots" / "abc").resolve()
