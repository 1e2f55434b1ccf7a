"""A captioning job: images in batches through a captioner, captions written through the caption store.

Each batch is written with the store's atomic batched save, so a job stopped or killed at
any moment leaves every caption file either as it was or with its new text, never half
written; the progress file (when given) lets the same job resume without redoing a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.caption.base import Captioner, load_image
from studio.caption.progress import CaptionProgress
from studio.core.dataset.captions.auto_caption import CaptionRules, caption_event, compose, over_token_limit
from studio.core.dataset.captions.caption_messages import (
    CaptionJobFinished,
    CaptionJobProgress,
    CaptionJobStarted,
    CaptionWarning,
)
from studio.core.dataset.captions.caption_store import CaptionStore
from studio.core.dataset.captions.caption_tags import CLIP_TOKEN_LIMIT

Emit = Callable[[dict[str, Any]], None]


@dataclass
class JobPlan:
    todo: list[Path]  # images the model will see, in dataset order
    kept: int = 0  # fill-missing: images that already have a caption
    resumed: int = 0  # done by an earlier run of the same job
    # (image, the image before it in the plan) named alike but for the extension (a.jpg, a.png): they read and
    # save one caption file, so only the first is captioned and the job names the other.
    shared: list[tuple[Path, Path]] = field(default_factory=list)


@dataclass
class JobResult:
    status: str = "completed"  # completed | stopped | failed
    captioned: int = 0  # images the model saw
    written: int = 0  # captions changed on disk
    unchanged: int = 0  # the model saw them but the caption stays (fill-missing, nothing new, empty output)
    problems: list[str] = field(default_factory=list)  # what went wrong per image (unreadable, conflict, not saved)
    long_captions: list[Path] = field(default_factory=list)  # captions proposed or written past the text encoder's window


def plan_job(store: CaptionStore, images: Sequence[Path], rules: CaptionRules,
             progress: CaptionProgress | None) -> JobPlan:
    """Which images the model must see: fill-missing skips captioned ones, a resumed job the done ones."""
    plan = JobPlan([])
    owners: dict[tuple[Path, str], Path] = {}  # a sidecar (its name in any case) -> the first image saved to it
    for image in images:
        caption = store.caption(image)
        owner = image
        if store.entries[image].caption_source != "metadata":  # a metadata.jsonl row is the image's own
            target = store.target_file(image)
            owner = owners.setdefault((target.parent, target.name.lower()), image)
        if rules.mode == "fill-missing" and caption:
            plan.kept += 1
        elif owner != image:
            plan.shared.append((image, owner))
        elif progress is not None and progress.is_done(image, caption):
            plan.resumed += 1
        else:
            plan.todo.append(image)
    return plan


class CaptionJob:
    """Runs a plan; `emit` gets the job's events (started, caption, progress, warning, finished)."""

    def __init__(self, store: CaptionStore, rules: CaptionRules, emit: Emit, *, write: bool = True,
                 progress: CaptionProgress | None = None, should_stop: Callable[[], bool] = lambda: False,
                 token_limit: int = CLIP_TOKEN_LIMIT) -> None:
        self.store, self.rules, self.emit = store, rules, emit
        self.write, self.progress, self.should_stop = write, progress, should_stop
        self.token_limit = token_limit  # what the project's text encoder reads; longer captions are named

    def run(self, captioner: Captioner, plan: JobPlan) -> JobResult:
        result = JobResult()
        total = len(plan.todo)
        self.emit(CaptionJobStarted(
            model=captioner.source.name, kind=captioner.source.kind, device=captioner.device,
            precision=captioner.precision, batch_size=captioner.batch_size, total=total, kept=plan.kept,
            resumed=plan.resumed).to_dict())
        for image, owner in plan.shared:
            self._warn(result, f"{image} was not captioned: it is named as {owner.name}, so the two share one "
                               f"caption file ({self.store.target_file(owner).name}). Rename one of them, or remove "
                               "it if it is the same picture in another format.")
        size = captioner.batch_size
        try:
            for start in range(0, total, size):
                if self.should_stop():  # before each batch: a stop asked while the model loaded captions none
                    result.status = "stopped"
                    break
                self._batch(captioner, plan.todo[start:start + size], result)
                self.emit(CaptionJobProgress(done=min(start + size, total), total=total).to_dict())
        finally:
            if self.write:
                self.store.remove_leftovers()  # a save cut short by a crash leaves nothing behind
        if result.status == "completed" and self.progress is not None and self.write:
            self.progress.finish()
        return result

    def _load(self, images: Sequence[Path], result: JobResult) -> list[tuple[Path, Any]]:
        loaded = []
        for path in images:
            try:
                loaded.append((path, load_image(path)))
            except (OSError, ValueError) as exc:
                self._warn(result, f"Cannot read {path}: {exc}. The image was skipped; fix or remove it.")
        return loaded

    def _batch(self, captioner: Captioner, images: Sequence[Path], result: JobResult) -> None:
        seen = captioner.caption(self._load(images, result))
        result.captioned += len(seen)
        planned: dict[Path, str | None] = {m.image: compose(self.store.caption(m.image), m, self.rules) for m in seen}
        if self.write and self.progress is not None:
            self.progress.record(planned)
        before = {image: self.store.caption(image) for image in planned}
        saved = self._save(planned, result) if self.write else set()
        for machine in seen:
            after = planned[machine.image]
            self.emit(caption_event(machine, before[machine.image], after, machine.image in saved))
            result.written += machine.image in saved
            result.unchanged += after is None
            if after is not None and over_token_limit(after, self.token_limit):
                result.long_captions.append(machine.image)

    def _save(self, planned: dict[Path, str | None], result: JobResult) -> set[Path]:
        changes = {image: text for image, text in planned.items() if text is not None}
        for image, text in changes.items():
            self.store.set_caption(image, text)
        if not changes:
            return set()
        report = self.store.flush(list(changes))
        for conflict in report.conflicts:
            self.store.take_disk_text(conflict)  # the other program's text stays; ours is dropped
            self._warn(result, f"{conflict.file} was changed by another program while captioning; "
                               "it was left as it is. Run the job again to caption it.")
        for error in report.errors:
            self._warn(result, str(error))  # the file is as it was; the job goes on with the next images
        return set(report.saved)

    def _warn(self, result: JobResult, message: str) -> None:
        result.problems.append(message)
        self.emit(CaptionWarning(message).to_dict())


def finished_event(result: JobResult, message: str = "") -> dict[str, Any]:
    return CaptionJobFinished(
        status=result.status, captioned=result.captioned, written=result.written, unchanged=result.unchanged,
        problems=len(result.problems), long_captions=[str(p) for p in result.long_captions],
        message=message).to_dict()
