"""README's command table names every command `studio-train` has, each as the help says it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from studio.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_cli_command_is_in_the_readme_table() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    rows = re.findall(r"^\| `studio-train ([a-z-]+)", README.read_text(encoding="utf-8"), re.M)
    assert sorted(set(commands) - set(rows)) == []
    assert sorted(set(rows) - set(commands)) == []  # and no command it does not have
