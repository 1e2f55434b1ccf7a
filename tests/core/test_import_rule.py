"""The import rule of DESIGN.md: core loads no Qt and no torch; gui never imports train or the
captioners; no import loops; feature folders depend only on what sits below them."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core import import_graph

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "diffusers", "transformers", "peft", "accelerate", "onnxruntime")
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


def test_gui_never_imports_train_captioners_or_torch() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _files("gui")
        for module, line, _top in _imports(path)
        if _root(module) in HEAVY or module.startswith(("studio.train", "studio.caption"))
    ]
    assert bad == []


def test_captioners_import_only_core() -> None:
    """The captioning wing runs in `studio-train caption`, beside the trainer: core below it, nothing else."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _files("caption")
        for module, line, _top in _imports(path)
        if _root(module) in QT or (module.startswith("studio.") and not module.startswith(("studio.core",
                                                                                          "studio.caption")))
    ]
    assert bad == []
    assert (ROOT / "studio" / "caption" / "__init__.py").is_file()


def test_cli_never_imports_qt() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _files("cli")
        for module, line, _top in _imports(path)
        if _root(module) in QT or module.startswith("studio.gui")
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
    assert "studio.core.config.schema" in facts["modules"]
    assert facts["loaded"] == []


@pytest.mark.skipif(os.environ.get("STUDIO_CORE_ONLY") != "1", reason="only in the core-only environment")
def test_core_environment_really_has_no_qt_or_torch() -> None:
    """The CI's core job must prove the core works without Qt or torch installed."""
    import importlib.util

    assert importlib.util.find_spec("PySide6") is None
    assert importlib.util.find_spec("torch") is None


# Core's feature folders in layers: a folder imports the core's root modules, its own
# folder and the folders of lower layers. The protocol (typed lines, the file tail, streamed commands)
# is below everything; the family declarations are data the config reads; the config is the contract
# everything reads; the estimate (what a run needs) reads the config against what the machine has (hardware);
# projects and exports put the others together; a cloud run's files are followed with the remote machines' mirrors.
CORE_LAYERS = {"protocol": -1, "families": 0, "config": 1, "dataset": 2, "hardware": 2, "models": 2, "runs": 2,
               "estimate": 3, "project": 4, "export": 4, "trainenv": 4, "tracking": 4, "remote": 5, "cloud": 6}
# The gui as one ordered list of floors: the ground (base: the event loop, layout state, the wheel guard,
# desktop links, the config watch, the self-test's options), the runner (the one place the window waits on
# anything: the Worker, the process wrapper, the run sources and controller, the GPU samplers), the shared
# widgets and the Training Environment window, the root (the context and the page base class), the page
# folders (never one another), and the shell on top (app, main window, self-test, banner, Qt check).
GUI_ROOT = "(root)"
GUI_LAYERS = {"base": 0, "runner": 1, "widgets": 2, "trainenv": 2, GUI_ROOT: 3, "shell": 5}
GUI_PAGE_LAYER = 4  # dataset, model, training, runs, export, project
# The trainer's pipeline builders and memory placement are used by the adapters (networks) and the families, the families by
# the data (caches encode with them); never the reverse. What a run reports (progress: events, the step meter, the
# console) sits on memory's per-rank figures; saving (checkpoints and the output files) on everything else.
TRAIN_LAYERS = {"pipelines": 0, "memory": 0, "weights": 0, "networks": 1, "progress": 1, "families": 2, "data": 3,
                "extras": 4, "saving": 5}


def feature_violations(root: Path) -> list[str]:
    """Imports that cross feature folders against the rules above, as `file:line: source -> target`."""
    bad = []
    for edge in import_graph.edges(root):
        src_wing = edge.source.split(".")[1] if edge.source.count(".") >= 1 else ""
        if not edge.target.startswith(f"studio.{src_wing}."):
            continue
        source = import_graph.feature_of(edge.source, src_wing)
        target = import_graph.feature_of(edge.target, src_wing)
        if src_wing == "gui":
            source, target = source or GUI_ROOT, target or GUI_ROOT
            if source == target:
                continue
            if GUI_LAYERS.get(target, GUI_PAGE_LAYER) >= GUI_LAYERS.get(source, GUI_PAGE_LAYER):
                bad.append(f"{edge.path.relative_to(root)}:{edge.line}: {edge.source} -> {edge.target}")
            continue
        if target is None or source == target:
            continue
        if src_wing == "core":
            allowed = source is None or CORE_LAYERS.get(target, 99) < CORE_LAYERS.get(source, -1)
        elif src_wing == "train":
            allowed = source is None or TRAIN_LAYERS.get(target, 99) < TRAIN_LAYERS.get(source, -1)
        else:
            allowed = True
        if not allowed:
            bad.append(f"{edge.path.relative_to(root)}:{edge.line}: {edge.source} -> {edge.target}")
    return sorted(set(bad))


def test_the_studio_has_no_import_loops() -> None:
    assert import_graph.loops(import_graph.edges(ROOT)) == []


def test_feature_folders_import_only_core_their_wing_root_and_lower_layers() -> None:
    assert feature_violations(ROOT) == []
    assert set(CORE_LAYERS) == {p.name for p in (ROOT / "studio" / "core").iterdir()
                                if (p / "__init__.py").is_file()}
    gui_root_modules = {p.stem for p in (ROOT / "studio" / "gui").glob("*.py")} - {"__init__"}
    assert gui_root_modules == {"context", "page"}  # every other gui module lives on its floor


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for folder in {p.parent for p in tmp_path.rglob("*.py")}:
        (folder / "__init__.py").touch()
    return tmp_path


def test_a_loop_closed_inside_a_function_is_found(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "studio/core/hardware/machine/probe.py": "def probe():\n    from studio.core.hardware.machine import probes\n",
        "studio/core/hardware/machine/probes.py": "from studio.core.hardware.machine.probe import probe\n",
        "studio/core/files.py": "",
    })
    assert import_graph.loops(import_graph.edges(root)) == [
        ["studio.core.hardware.machine.probe", "studio.core.hardware.machine.probes"]]


def test_a_cross_feature_import_is_found(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "studio/gui/dataset/page.py": "from studio.gui.model.form import SettingsForm\nfrom studio.gui import page\n",
        "studio/gui/model/form.py": "from studio.gui.widgets.run_plots import RunPlots\n",
        "studio/gui/widgets/run_plots.py": "",
        "studio/gui/page.py": "",
        "studio/core/config/schema.py": "from studio.core.dataset.scan import scan\n",
        "studio/core/dataset/scan.py": "from studio.core.config.schema import TrainConfig\n",
    })
    assert feature_violations(root) == [
        "studio/core/config/schema.py:1: studio.core.config.schema -> studio.core.dataset.scan",
        "studio/gui/dataset/page.py:1: studio.gui.dataset.page -> studio.gui.model.form",
    ]
