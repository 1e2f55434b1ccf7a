"""The import rule of DESIGN.md: core loads no Qt and no torch; gui never imports train."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "diffusers", "transformers", "peft", "accelerate")
QT = ("PySide6", "pyqtgraph")


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(module, line, at_module_level) for every import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno, id(node) in top))
    return found


def _files(package: str) -> list[Path]:
    return sorted((ROOT / "studio" / package).rglob("*.py"))


def _root(module: str) -> str:
    return module.split(".")[0]


def test_core_never_imports_qt_gui_or_train() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _files("core")
        for module, line, _top in _imports(path)
        if _root(module) in QT or module.startswith(("studio.gui", "studio.train"))
    ]
    assert bad == []


def test_core_imports_torch_only_inside_functions() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _files("core")
        for module, line, top in _imports(path)
        if top and _root(module) in HEAVY
    ]
    assert bad == []


def test_gui_never_imports_train_or_torch() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _files("gui")
        for module, line, _top in _imports(path)
        if _root(module) in HEAVY or module.startswith("studio.train")
    ]
    assert bad == []


def test_train_never_imports_gui() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _files("train")
        for module, line, _top in _imports(path)
        if _root(module) in QT or module.startswith("studio.gui")
    ]
    assert bad == []


def test_importing_every_core_module_loads_neither_qt_nor_torch() -> None:
    script = (
        "import importlib, json, pkgutil, sys\n"
        "import studio.core\n"
        "names = [m.name for m in pkgutil.walk_packages(studio.core.__path__, 'studio.core.')]\n"
        "for name in names: importlib.import_module(name)\n"
        f"print(json.dumps({{'modules': names, 'loaded': sorted(m for m in sys.modules if m.split('.')[0] in {list(HEAVY + QT)!r})}}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert "studio.core.config" in facts["modules"]
    assert facts["loaded"] == []


@pytest.mark.skipif(os.environ.get("STUDIO_CORE_ONLY") != "1", reason="only in the core-only environment")
def test_core_environment_really_has_no_qt_or_torch() -> None:
    """The CI's core job must prove the core works without Qt or torch installed."""
    import importlib.util

    assert importlib.util.find_spec("PySide6") is None
    assert importlib.util.find_spec("torch") is None
