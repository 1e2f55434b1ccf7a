"""README's command table names every command `studio-train` has, each as the help says it, with options it has."""

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


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option of a command and of its actions (`remote run --on`, `env install --wheelhouse`)."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= _options(child)
    return found


def test_every_option_the_readme_table_shows_is_one_the_command_takes() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    rows = re.findall(r"^\| `studio-train ([a-z-]+)([^`]*)`", README.read_text(encoding="utf-8"), re.M)
    unknown = [f"{name} {option}" for name, rest in rows if name in commands
               for option in re.findall(r"--[a-z][a-z0-9-]*", rest) if option not in _options(commands[name])]
    assert unknown == []  # a person copying the line gets "unrecognized arguments"
