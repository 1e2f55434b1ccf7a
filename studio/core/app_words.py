"""Which words a message gives for what to do next: a `studio-train` command where the studio is installed
with its command line, the window's own action in the desktop app, which ships no `studio-train`.

The desktop app's child processes (the trainer, downloads, captioning) run in the training environment's
Python, not in the app: the app hands them `STUDIO_DESKTOP_APP=1` so that their messages, shown in the
window, name its buttons too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from studio.core.quoting import command_line
from studio.core.resources import is_frozen

DESKTOP_APP_ENV = "STUDIO_DESKTOP_APP"


def in_desktop_app() -> bool:
    """Whether this process is the desktop app, or a process it started."""
    return is_frozen() or os.environ.get(DESKTOP_APP_ENV) == "1"


def desktop_app_env() -> dict[str, str]:
    """What the desktop app adds to a child process's environment (nothing elsewhere)."""
    return {DESKTOP_APP_ENV: "1"} if in_desktop_app() else {}


def command_or_action(command: str, action: str) -> str:
    """`command` (words with a `studio-train` command) where it is installed; `action` in the desktop app."""
    return action if in_desktop_app() else command


def cli_command(args: Sequence[str]) -> str:
    """A route only the command line has, in words: `studio-train ARGS`, or in the desktop app the same
    command run by the training environment's Python (the app has no `studio-train` of its own)."""
    if not in_desktop_app():
        return f"`{command_line(['studio-train', *args])}`"
    from studio.core.studio_command import studio_command
    from studio.core.training_python import NoTrainingPython

    try:
        return f"`{command_line(studio_command(args))}` in a terminal"
    except NoTrainingPython:
        return (f"`-m studio.cli {command_line(args)}` run by the training environment's Python in a terminal, once "
                "Tools → Training Environment has set it up")
