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
    """The options of a command and of its own subcommands (`remote run --on`, `cloud launch --gpus`)."""
    found = {flag for action in parser._actions for flag in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def test_every_option_the_docs_give_a_command_is_one_it_takes() -> None:
    # A person copies `studio-train download REPO --to DIR` from the docs and gets argparse's error.
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    pages = [README, *sorted((README.parent / "docs").glob("*.md"))]
    unknown = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        blocks = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S))
        given = re.findall(r"`studio-train ([a-z-]+)([^`]*)`", text) + re.findall(r"studio-train ([a-z-]+)([^#\n]*)", blocks)
        for command, rest in given:
            taken = _options(commands[command]) if command in commands else set()
            unknown += [f"{page.name}: studio-train {command}{rest}" for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest)
                        if flag not in taken]
    assert unknown == []
