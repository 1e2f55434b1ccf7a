"""Captioning tests: the demo folder copied per test, and torch on one thread (the models are tiny)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.torch_threads import one_torch_thread  # noqa: F401  (autouse here: torch on one thread)


@pytest.fixture
def demo_folder(demo_data: Path, tmp_path: Path) -> Path:
    """The demo shapes (8 images with captions); the first three have their caption removed."""
    folder = Path(shutil.copytree(demo_data, tmp_path / "shapes"))
    for caption in sorted(folder.glob("*.txt"))[:3]:
        caption.unlink()
    return folder
