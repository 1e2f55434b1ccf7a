"""Which Python runs the trainer when the config names none (`launch.python` empty).

The studio sets up a training environment of its own (studio/core/trainenv) in the user
data folder. Once that environment is complete it is the default; before that, a studio
run from source trains with its own interpreter, and the frozen app, which has no
Python of its own, asks the person to set the environment up.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from studio.core.resources import app_root, is_frozen
from studio.core.user_dirs import data_dir

ENV_FOLDER = "training-env"
# Written last by a complete install; its absence means the environment is not ready.
READY_FILE = "studio-ready.json"


class NoTrainingPython(RuntimeError):
    """The frozen app has no training environment yet and the config names no interpreter."""


def env_dir() -> Path:
    """The studio's training environment: $STUDIO_TRAINING_ENV, else `training-env` in the user data folder."""
    return Path(os.environ.get("STUDIO_TRAINING_ENV") or data_dir() / ENV_FOLDER)


def env_python(folder: Path) -> Path:
    """The interpreter of a virtual environment."""
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ready_env_python(folder: Path | None = None) -> Path | None:
    """The training environment's interpreter when its install finished, else None."""
    folder = folder or env_dir()
    python = env_python(folder)
    return python if (folder / READY_FILE).is_file() and python.exists() else None


def default_training_python() -> str:
    """The studio's training environment when ready, else this interpreter (not in the frozen app)."""
    ready = ready_env_python()
    if ready is not None:
        return str(ready)
    if is_frozen():
        raise NoTrainingPython(
            "the studio has no training environment yet: set it up with Tools → Training Environment "
            "(it downloads PyTorch and the training libraries once), or set launch.python to a Python "
            "that has them"
        )
    return sys.executable


def pins_stamp(constraints: Path | None = None) -> str:
    """Changes when the package versions the studio pins (constraints/ci.txt) change."""
    try:
        text = (constraints or app_root() / "constraints" / "ci.txt").read_bytes()
    except OSError:
        return ""
    return hashlib.sha256(text).hexdigest()[:16]


def made_for_this_app(folder: Path | None = None) -> bool:
    """The complete environment links this copy of the app's code and holds the versions it pins.

    An update unpacked into a new folder (the Windows download is a zip named after its version) leaves the
    environment running the old copy's trainer; one with new pins leaves it holding the old packages. An
    environment from before the install recorded these facts counts as made for this app.
    """
    try:
        ready = json.loads(((folder or env_dir()) / READY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(ready, dict):
        return False
    source, pins = ready.get("studio_source"), ready.get("pins")
    return (source is None or Path(source) == app_root()) and (pins is None or pins == pins_stamp())


def needs_training_env(launch_python: str | None) -> bool:
    """True when training cannot start until the studio's environment is set up, or brought up to date with
    this app (frozen app, none named)."""
    return not launch_python and is_frozen() and (ready_env_python() is None or not made_for_this_app())
