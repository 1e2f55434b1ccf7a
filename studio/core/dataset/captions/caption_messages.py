"""The lines `studio-train caption --json` prints, as protocol messages: written by the job, read by the window.

Each line is checked field by field when read (`CAPTION_MESSAGES.parse`), so a malformed
line is skipped and counted by the reader instead of raising inside a Qt slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from studio.core.dataset.captions.auto_caption import (
    EVENT_CAPTION,
    EVENT_FINISHED,
    EVENT_PROGRESS,
    EVENT_STARTED,
    EVENT_WARNING,
    MachineCaption,
    ScoredTag,
    TagCategory,
)
from studio.core.protocol.jsonlines import Message, Protocol


@dataclass
class CaptionJobStarted(Message):
    type: ClassVar[str] = EVENT_STARTED
    model: str
    kind: str
    device: str = ""
    precision: str = ""
    batch_size: int = 1
    total: int = 0
    kept: int = 0
    resumed: int = 0


@dataclass
class CaptionProposed(Message):
    """A machine caption for one image, and what the rules make of it (before, after, written)."""

    type: ClassVar[str] = EVENT_CAPTION
    image: str
    text: str = ""
    tags: list[list[Any]] = field(default_factory=list)  # [name, score, category]
    before: str | None = None
    after: str | None = None
    written: bool = False
    tokens: int = 0

    def machine_caption(self) -> MachineCaption:
        """ValueError when a tag is not [name, score, category]."""
        tags = []
        for tag in self.tags:
            try:
                name, score, category = tag
                score = float(score)
            except (TypeError, ValueError):
                raise ValueError(f"caption of {self.image}: {str(tag)[:60]} is not [name, score, category]") from None
            if category not in get_args(TagCategory):
                raise ValueError(f"caption of {self.image}: tag category {str(category)[:20]!r} is not one of "
                                 f"{', '.join(get_args(TagCategory))}")
            tags.append(ScoredTag(str(name), score, category))
        return MachineCaption(Path(self.image), self.text, tuple(tags))


@dataclass
class CaptionJobProgress(Message):
    type: ClassVar[str] = EVENT_PROGRESS
    done: int
    total: int


@dataclass
class CaptionWarning(Message):
    type: ClassVar[str] = EVENT_WARNING
    message: str


@dataclass
class CaptionJobFinished(Message):
    type: ClassVar[str] = EVENT_FINISHED
    status: Literal["completed", "stopped", "failed"] | str
    captioned: int = 0
    written: int = 0
    unchanged: int = 0
    problems: int = 0
    long_captions: list[str] = field(default_factory=list)
    message: str = ""


CAPTION_MESSAGES = Protocol(
    "caption-job message",
    (CaptionJobStarted, CaptionProposed, CaptionJobProgress, CaptionWarning, CaptionJobFinished),
)
