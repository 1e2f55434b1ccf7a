"""Where the studio's shipped files live (resources/, presets/, the user guide, its own source).

One function, `app_root`, knows: a frozen app (PyInstaller) unpacks them beside its
executable, in `sys._MEIPASS`; a source checkout, an editable install or the studio's
copy that a training environment or an exported bundle runs has them beside the
`studio` package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path


def is_frozen() -> bool:
    """True inside the frozen desktop app (no Python of its own to run the trainer with)."""
    return bool(getattr(sys, "frozen", False))


def restore_library_path(environ: MutableMapping[str, str] | None = None) -> None:
    """Give the programs the frozen app starts the person's own library path.

    On Linux the frozen app's loader runs it with LD_LIBRARY_PATH set to the app's folder of libraries,
    keeping the person's value in LD_LIBRARY_PATH_ORIG, and every program the app starts inherited it: ssh
    then loaded the app's OpenSSL and Kerberos, a KDE file manager opened on an output folder the app's Qt,
    where the system's are of another version. The app's own libraries are loaded by then (the loader reads
    the variable once, as the process starts), so the app itself needs it no more."""
    environ = os.environ if environ is None else environ
    if not is_frozen() or not sys.platform.startswith("linux") or "LD_LIBRARY_PATH" not in environ:
        return
    own = environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if own is None:
        del environ["LD_LIBRARY_PATH"]
    else:
        environ["LD_LIBRARY_PATH"] = own


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
