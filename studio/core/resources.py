"""Where the studio's shipped files live (resources/, presets/, the user guide, its own source).

One function, `app_root`, knows: a frozen app (PyInstaller) unpacks them beside its
executable, in `sys._MEIPASS`; a source checkout, an editable install or the studio's
copy that a training environment or an exported bundle runs has them beside the
`studio` package.
"""

from __future__ import annotations

import sys
from pathlib import Path


def is_frozen() -> bool:
    """True inside the frozen desktop app (no Python of its own to run the trainer with)."""
    return bool(getattr(sys, "frozen", False))


def app_root() -> Path:
    """The folder that holds resources/, presets/, docs/ and the `studio` package's source."""
    bundle = getattr(sys, "_MEIPASS", None)
    if is_frozen() and bundle:
        return Path(bundle)
    return Path(__file__).resolve().parents[2]


def resources_dir() -> Path:
    """The top-level `resources/` folder."""
    return app_root() / "resources"


def resource_path(*parts: str) -> Path:
    """A path inside `resources/`; it may not exist (callers say what is missing)."""
    return resources_dir().joinpath(*parts)
