"""Datasets the tests build: small real images with sidecar captions in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from dataset_files import MakeDataset, make_image


@pytest.fixture
def make_dataset(tmp_path: Path) -> MakeDataset:
    """{relative image path: caption or None} -> a folder with images and .txt sidecars."""

    def build(files: dict[str, str | None]) -> Path:
        root = tmp_path / "data"
        root.mkdir(exist_ok=True)
        for i, (rel, caption) in enumerate(files.items()):
            image = make_image(root / rel, color=(i * 37 % 256, i * 91 % 256, 120))
            if caption is not None:
                image.with_suffix(".txt").write_text(caption, encoding="utf-8")
        return root

    return build
