"""The tools that make the training environment: uv when there is one, else Python's venv and pip.

uv is looked for beside the app (a release may carry it), then on PATH; it can fetch a
Python by itself. Without uv the environment needs a Python 3.11+: the studio's own
interpreter when it runs from source, else one found on PATH (the frozen app has none
to lend).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from studio.core.console_window import no_window
from studio.core.resources import app_root, is_frozen

UV = "uv"
VENV = "venv"
MIN_PYTHON = (3, 11)
# The Python uv fetches when the frozen app has none to lend: the version CI tests.
UV_PYTHON = "3.11"
PYTHON_NAMES = ("python3.13", "python3.12", "python3.11", "python3", "python")
VERSION_TIMEOUT_S = 15


@dataclass(frozen=True)
class EnvTool:
    kind: str  # uv | venv
    program: str  # uv's executable, or the Python that makes the venv
    python_request: str  # what `uv venv --python` gets; the interpreter itself for venv

    def describe(self) -> str:
        return f"uv ({self.program})" if self.kind == UV else f"Python's venv and pip ({self.program})"


class NoEnvTool(RuntimeError):
    """Neither uv nor a Python 3.11+ was found; the message says what to install."""


def find_uv() -> str | None:
    name = "uv.exe" if os.name == "nt" else "uv"
    for folder in (app_root(), Path(sys.executable).parent):
        if (folder / name).is_file():
            return str(folder / name)
    return shutil.which(UV)


def python_version(program: str) -> tuple[int, int] | None:
    """(major, minor) of an interpreter, or None when it does not run."""
    try:
        out = subprocess.run([program, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=VERSION_TIMEOUT_S, check=False, creationflags=no_window())
    except (OSError, subprocess.SubprocessError):
        return None
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 2:
        return None
    return int(parts[0]), int(parts[1])


def find_base_python() -> str | None:
    """A Python 3.11+ to make the venv with: this one when not frozen, else the first on PATH."""
    if not is_frozen():
        return sys.executable
    for name in PYTHON_NAMES:
        found = shutil.which(name)
        if found and (python_version(found) or (0, 0)) >= MIN_PYTHON:
            return found
    return None


def choose_tool(kind: str | None = None) -> EnvTool:
    """uv if present (or asked for), else venv; `kind` forces one."""
    uv = find_uv() if kind in (None, UV) else None
    if uv:
        request = sys.executable if not is_frozen() else UV_PYTHON
        return EnvTool(UV, uv, request)
    if kind == UV:
        raise NoEnvTool("uv was asked for but is not installed: install it (https://docs.astral.sh/uv/) "
                        "or leave the choice to the studio")
    python = find_base_python()
    if python is None:
        raise NoEnvTool("no Python 3.11 or newer was found, and no uv: install uv "
                        "(https://docs.astral.sh/uv/, one file) or Python 3.11+, then try again")
    return EnvTool(VENV, python, python)


def create_command(tool: EnvTool, folder: Path) -> list[str]:
    if tool.kind == UV:
        return [tool.program, "venv", "--python", tool.python_request, str(folder)]
    return [tool.program, "-m", "venv", "--clear", str(folder)]


def install_command(tool: EnvTool, python: Path, progress_bar_raw: bool = False, isolated: bool = False) -> list[str]:
    """The start of an install command into the environment whose interpreter is `python`.

    `isolated` ignores the person's pip or uv configuration (an offline install from a
    folder of wheels takes nothing from anywhere else).
    """
    if tool.kind == UV:
        return [tool.program, "pip", "install", "--python", str(python), *(["--no-config"] if isolated else [])]
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    command += ["--isolated"] if isolated else []
    return [*command, "--progress-bar", "raw"] if progress_bar_raw else command


def pip_has_raw_progress(python: Path) -> bool:
    """pip 24.1+ prints `Progress N of M` lines with `--progress-bar raw`."""
    site = python.parent.parent
    for info in site.glob("**/site-packages/pip-*.dist-info"):
        version = info.name.removeprefix("pip-").removesuffix(".dist-info").split(".")
        try:
            return (int(version[0]), int(version[1])) >= (24, 1)
        except (ValueError, IndexError):
            return False
    return False
