"""The lines `studio-train download --json` prints, as protocol messages: progress, done, error.

The window reads them with `DOWNLOAD_MESSAGES.parse`: a malformed line is skipped and
counted, never a `KeyError` inside a Qt slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from studio.core.models.downloads import DownloadProgress
from studio.core.protocol.jsonlines import Message, Protocol


@dataclass
class DownloadProgressed(Message):
    type: ClassVar[str] = "progress"
    repo_id: str
    file: str = ""
    files_done: int = 0
    files_total: int = 0
    done_bytes: int = 0
    total_bytes: int = 0
    rate_bps: float = 0.0
    eta_s: float | None = None
    phase: str = "downloading"

    @classmethod
    def of(cls, progress: DownloadProgress) -> DownloadProgressed:
        data = progress.as_dict()
        return cls(**data)

    def progress(self) -> DownloadProgress:
        return DownloadProgress(self.repo_id, self.file, self.files_done, self.files_total, self.done_bytes,
                                self.total_bytes, self.rate_bps, self.phase)


@dataclass
class DownloadDone(Message):
    type: ClassVar[str] = "done"
    path: str
    model: str = ""


@dataclass
class DownloadFailed(Message):
    type: ClassVar[str] = "error"
    message: str
    gated: bool = False  # a token would help


DOWNLOAD_MESSAGES = Protocol("download message", (DownloadProgressed, DownloadDone, DownloadFailed))
