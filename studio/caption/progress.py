"""What a stopped or crashed captioning job had done, so the same command resumes where it was.

Before a batch's captions are written, the caption each image is about to get is recorded
here (one small JSON file, written atomically). On resume an image counts as done when its
caption on disk is the one recorded; a batch cut off before its captions were written is
simply done again, and nothing is ever appended twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from studio.core.dataset.captions.caption_files import write_texts_atomically
from studio.core.dataset.captions.caption_guard import PROGRESS_FILE

_KEPT = None  # recorded for an image whose caption the job left as it was


class ProgressWriteError(Exception):
    """The progress file cannot be written (a read-only folder, a full disk); nothing was captioned after it."""


class CaptionProgress:
    """The progress file of one dataset folder, for one set of job settings."""

    def __init__(self, folder: Path, settings: Mapping[str, Any]) -> None:
        self.path = folder / PROGRESS_FILE
        self.folder = folder
        self.settings = dict(settings)
        self.done: dict[str, str | None] = {}
        self.discarded_other_settings = False

    @classmethod
    def open(cls, folder: Path, settings: Mapping[str, Any]) -> CaptionProgress:
        """The job's progress so far; an unfinished job with other settings is started over."""
        progress = cls(folder, settings)
        try:
            data = json.loads(progress.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return progress
        except (OSError, ValueError):
            data = {}  # a broken file: every image is done again (it was written atomically, so rare)
        if isinstance(data, dict) and data.get("settings") == progress.settings and isinstance(data.get("done"), dict):
            progress.done = {str(k): (v if isinstance(v, str) else _KEPT) for k, v in data["done"].items()}
        else:
            progress.discarded_other_settings = bool(data)
        return progress

    def _key(self, image: Path) -> str:
        try:
            return Path(os.path.relpath(image, self.folder)).as_posix()
        except ValueError:  # Windows: a project on D: whose images are on E: has no relative path to them
            return Path(image).as_posix()

    def is_done(self, image: Path, caption_now: str | None) -> bool:
        key = self._key(image)
        if key not in self.done:
            return False
        recorded = self.done[key]
        return recorded is _KEPT or recorded == (caption_now or "")

    def record(self, planned: Mapping[Path, str | None]) -> None:
        """Note the caption each image is about to get (None: left as it is), before it is written."""
        self.done.update({self._key(image): text for image, text in planned.items()})
        text = json.dumps({"v": 1, "settings": self.settings, "done": self.done}, ensure_ascii=False)
        failed = write_texts_atomically({self.path: text})
        if failed:
            error = failed[self.path]
            raise ProgressWriteError(
                f"Cannot write {self.path}: {error.strerror or error}. Make the folder writable (or free disk "
                "space) and run the same command again; the captions written so far are kept.") from error

    def finish(self) -> None:
        """The job completed: nothing is left to resume."""
        self.path.unlink(missing_ok=True)
