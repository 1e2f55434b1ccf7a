"""Captioning tests: the demo folder copied per test, and torch on one thread (the models are tiny)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> Iterator[None]:
    try:
        import torch
    except ImportError:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def demo_folder(demo_data: Path, tmp_path: Path) -> Path:
    """The demo shapes (8 images with captions); the first three have their caption removed."""
    folder = Path(shutil.copytree(demo_data, tmp_path / "shapes"))
    for caption in sorted(folder.glob("*.txt"))[:3]:
        caption.unlink()
    return folder
