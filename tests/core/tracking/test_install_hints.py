"""The install hints name the studio's own distribution: `studio` on the package index is another project."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from studio.core.tracking.base import MissingLogger

ROOT = Path(__file__).resolve().parents[3]


def test_a_missing_logger_says_to_install_the_studios_logging_extra() -> None:
    message = str(MissingLogger("wandb"))
    assert "pip install 'sd-training-studio[logging]'" in message and "pip install wandb" in message


def test_every_extra_named_in_messages_and_docs_is_the_distributions() -> None:
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "studio").rglob("*.py")]
    wrong = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in files
             for match in re.finditer(r"(?<![\w.-])[\w-]*studio\[\w+\]", path.read_text(encoding="utf-8"))
             if not match.group(0).startswith(f"{name}[")]
    assert wrong == []
