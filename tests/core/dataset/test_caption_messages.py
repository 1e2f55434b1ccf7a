"""The caption job's lines as protocol messages: what the job writes reads back; a malformed line is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.core.dataset.captions.auto_caption import MachineCaption, ScoredTag, caption_event
from studio.core.dataset.captions.caption_messages import (
    CAPTION_MESSAGES,
    CaptionJobFinished,
    CaptionJobProgress,
    CaptionProposed,
)
from studio.core.protocol.jsonlines import UnknownMessage


def _line(data: dict[str, object]) -> str:
    return json.dumps(data, ensure_ascii=False)


def test_what_the_job_writes_reads_back_as_its_message() -> None:
    caption = MachineCaption(Path("/data/a.png"), tags=(ScoredTag("red", 0.9), ScoredTag("miku", 0.8, "character")))
    message = CAPTION_MESSAGES.parse(_line(caption_event(caption, "old", "old, red", True)))
    assert isinstance(message, CaptionProposed) and message.written and message.tokens > 0
    assert message.machine_caption() == caption
    progress = CAPTION_MESSAGES.parse(CaptionJobProgress(done=2, total=4).to_json())
    assert progress == CaptionJobProgress(done=2, total=4)
    finished = CAPTION_MESSAGES.parse(_line({"type": "finished", "status": "stopped", "captioned": 3, "extra": 1}))
    assert isinstance(finished, CaptionJobFinished) and finished.status == "stopped" and finished.captioned == 3


@pytest.mark.parametrize(("line", "why"), [
    ('{"type": "progress", "done": "two", "total": 4}', "done = 'two' has the wrong type"),
    ('{"type": "progress", "total": 4}', "missing"),
    ('{"type": "caption", "image": 7}', "image = '7' has the wrong type"),
    ('{"type": "finished", "status": 3}', "status = '3' has the wrong type"),
    ('[1, 2]', "not a caption-job message object"),
    ('{"type": "progress", "done": 1, "total": ', "Expecting value"),
])
def test_a_malformed_caption_job_line_is_refused_with_the_field_it_names(line: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        CAPTION_MESSAGES.parse(line)


def test_a_tag_that_is_not_name_score_category_is_refused_when_read() -> None:
    message = CAPTION_MESSAGES.parse('{"type": "caption", "image": "a.png", "tags": [["red", "high", "general"]]}')
    assert isinstance(message, CaptionProposed)
    with pytest.raises(ValueError, match="is not \\[name, score, category\\]"):
        message.machine_caption()
    odd = CAPTION_MESSAGES.parse('{"type": "caption", "image": "a.png", "tags": [["red", 0.5, "colour"]]}')
    with pytest.raises(ValueError, match="category 'colour'"):
        odd.machine_caption()  # type: ignore[attr-defined]


def test_a_type_from_a_newer_job_is_unknown_not_garbage() -> None:
    with pytest.raises(UnknownMessage):
        CAPTION_MESSAGES.parse('{"type": "hologram"}')
