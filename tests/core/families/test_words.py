"""The words people read first name every family the registry declares: README's opening, pyproject's
description (the package index), the guide's first paragraph and `studio-train --help`."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from studio.core.families import FAMILIES

ROOT = Path(__file__).resolve().parents[3]


def _texts() -> dict[str, str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    guide = (ROOT / "docs" / "index.md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["description"]
    return {"README.md": readme, "docs/index.md": guide, "pyproject.toml": project}


@pytest.mark.parametrize("spec", FAMILIES, ids=lambda spec: spec.name)
def test_every_family_is_named_where_people_read_first(spec) -> None:  # type: ignore[no-untyped-def]
    missing = [where for where, text in _texts().items() if spec.title not in " ".join(text.split())]
    assert missing == [], f"{spec.title} is not named in {missing}"


def test_the_command_lines_help_names_every_family() -> None:
    from studio.cli import build_parser

    help_text = " ".join(build_parser().format_help().split())
    assert [spec.title for spec in FAMILIES if spec.title not in help_text] == []
