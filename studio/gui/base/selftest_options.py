"""Options of `python -m studio --self-test`, shared by the pages."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class SelfTestOptions:
    project: Path | None = None
    screenshots: Path | None = None
    hardware: Path | None = None
    replay: Path | None = None
    train_demo: bool = False
    size: tuple[int, int] | None = None  # the window's size for the screenshots
