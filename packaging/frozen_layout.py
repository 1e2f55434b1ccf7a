"""What the frozen GUI leaves out and what it carries besides its code (read by studio.spec)."""

from __future__ import annotations

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
    package list and pins the training environment is installed from."""
    docs = [(str(p), "docs") for p in sorted((root / "docs").glob("*.md"))]
    return [
        (str(root / "pyproject.toml"), "."),
        (str(root / "constraints" / "ci.txt"), "constraints"),
        *_tree(root / "resources", "resources"),
        *_tree(root / "presets", "presets"),
        *docs,
        *_tree(root / "docs" / "images", "docs/images"),
        *_tree(root / "studio", "studio", skip=TRAINER_SOURCE_SKIP),
    ]


def keep_data(destination: str) -> bool:
    """Qt's translations of its own dialogs: the studio speaks English only (7 MB less)."""
    return not destination.replace("\\", "/").startswith("PySide6/Qt/translations/")
