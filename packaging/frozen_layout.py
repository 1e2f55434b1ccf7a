"""What the frozen GUI leaves out and what it carries besides its code (read by studio.spec)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

# The window never imports these: the trainer and its libraries live in the training
# environment, test and build tools in the developer's. Leaving them out keeps the
# download small and the start fast.
EXCLUDED_MODULES = [
    "torch", "torchvision", "diffusers", "transformers", "peft", "accelerate", "safetensors",
    "huggingface_hub", "tokenizers", "onnxruntime", "onnx", "bitsandbytes", "prodigyopt",
    "studio.train", "studio.caption", "studio.cli", "tests",
    "sympy", "networkx", "jinja2", "scipy", "pandas", "matplotlib", "IPython", "tkinter",
    "pytest", "_pytest", "pytestqt", "mypy", "ruff", "setuptools", "pip", "PyInstaller",
    "OpenGL", "cupy", "numba", "h5py", "PyQt5", "PyQt6", "PySide2",
    # Pulled in by optional imports of the libraries above, never by the window.
    "rich", "pygments", "markdown_it", "yaml", "charset_normalizer", "requests", "urllib3",
    "IPython", "pyqtgraph.examples", "pyqtgraph.opengl", "pyqtgraph.jupyter",
    # PyInstaller adds this itself when it is missing, changing the list in place; the next build
    # then sees "excludes changed" and analyses everything again instead of reusing its work folder.
    "__main__",
]

# Linux: libraries every desktop has, which must be the system's own. They belong to its graphics,
# font and C++ stack: a bundled copy from the build machine, loaded beside the system's GPU driver,
# theme or input method, is older or newer than what those expect. The names are those of the
# AppImage project's exclude list (tested across distributions), as far as the app would carry them.
# The glibc floor of the download (that of the build machine) is newer than any of these need.
SYSTEM_LIBRARIES = (
    "libstdc++", "libgcc_s", "libz", "libexpat", "libuuid", "libcom_err", "libgpg-error",
    "libX11", "libfontconfig", "libfreetype", "libharfbuzz", "libfribidi", "libthai",
    "libglib-2.0", "libgio-2.0", "libgobject-2.0", "libgmodule-2.0", "libgthread-2.0",
    "libpango-1.0", "libpangocairo-1.0", "libpangoft2-1.0", "libgdk_pixbuf-2.0",
)
_SYSTEM = re.compile("^(" + "|".join(re.escape(name) for name in SYSTEM_LIBRARIES) + r")\.so(\.[0-9.]+)?$")
# Qt's GTK 3 theme plugin loads the system's GTK into the process next to the libraries above; without it Qt
# follows the desktop through its XDG portal theme and draws its own dialogs. Its libraries (cairo, atk,
# pixman, …) go with it.
DROPPED_PLUGINS = ("platformthemes/libqgtk3.so",)

# The studio's own code that the training environment runs (it reads it from the app's
# folder through a .pth file): everything but the window.
TRAINER_SOURCE_SKIP = ("gui", "__pycache__")


def _tree(source: Path, target: str, skip: tuple[str, ...] = ("__pycache__",)) -> list[tuple[str, str]]:
    """(file, destination folder) pairs for every file under `source`."""
    pairs = []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.is_file() and not any(part in skip or part.startswith(".") for part in relative.parts):
            pairs.append((str(path), str(Path(target, *relative.parts[:-1]))))
    return pairs


def hidden_imports(root: Path) -> list[str]:
    """Every module of the window and the core: pages are imported by name when first shown,
    which PyInstaller cannot see."""
    names = []
    for wing in ("gui", "core"):
        for path in sorted((root / "studio" / wing).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def bundle_datas(root: Path) -> list[tuple[str, str]]:
    """resources/, presets/, the user guide, the trainer's source as plain files, and the
    package list and pins the training environment (and the cloud environment's SkyPilot) is installed from."""
    docs = [(str(p), "docs") for p in sorted((root / "docs").glob("*.md"))]
    return [
        (str(root / "pyproject.toml"), "."),
        (str(root / "constraints" / "ci.txt"), "constraints"),
        (str(root / "constraints" / "cloud.txt"), "constraints"),
        *_tree(root / "resources", "resources"),
        *_tree(root / "presets", "presets"),
        *docs,
        *_tree(root / "docs" / "images", "docs/images"),
        *_tree(root / "studio", "studio", skip=TRAINER_SOURCE_SKIP),
    ]


def keep_data(destination: str) -> bool:
    """Qt's translations of its own dialogs: the studio speaks English only (7 MB less)."""
    return not destination.replace("\\", "/").startswith("PySide6/Qt/translations/")


def is_system_library(name: str) -> bool:
    """A library the desktop provides (`SYSTEM_LIBRARIES`); a wheel's renamed private copy
    (libfreetype-57f805ba.so.6) is not one of them."""
    return bool(_SYSTEM.match(os.path.basename(name)))


def slim_binaries(binaries: Iterable[tuple[str, str, str]],
                  needed: Callable[[str], list[str]]) -> list[tuple[str, str, str]]:
    """PyInstaller's binaries without the system's libraries and the dropped plugins, and without the libraries
    that only those needed. `needed(source)` names the libraries a file links (its DT_NEEDED)."""
    entries = list(binaries)
    needed = functools.lru_cache(maxsize=None)(needed)
    by_name = {os.path.basename(e[0]): e for e in entries}
    removed = {os.path.basename(e[0]) for e in entries
               if is_system_library(e[0]) or e[0].replace(os.sep, "/").endswith(DROPPED_PLUGINS)}

    def linked_by(start: Iterable[str], through: set[str]) -> set[str]:
        """The bundled libraries that the files `start` link, and those they link, not through `through`."""
        seen: set[str] = set()
        todo = [by_name[name][1] for name in start]
        while todo:
            for name in needed(todo.pop()):
                if name in by_name and name not in seen and name not in through:
                    seen.add(name)
                    todo.append(by_name[name][1])
        return seen

    # What the dropped files link goes too, unless a file still there links it, and only what PyInstaller
    # collected for being linked (it lies at the bundle's top): a package's own files, such as Qt's libraries
    # that the theme plugin links and Python loads, stay. Repeated until nothing more goes (cairo's pixman).
    top = {e[0] for e in entries if "/" not in e[0].replace(os.sep, "/")}
    reachable = linked_by(set(removed), through=set()) & top
    while True:
        still_linked = linked_by(set(by_name) - removed, through=removed)
        orphans = reachable - removed - still_linked
        if not orphans:
            break
        removed |= orphans
    return [e for e in entries if os.path.basename(e[0]) not in removed]

