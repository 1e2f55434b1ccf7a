"""What the frozen app carries: every window module (pages load by name), the shipped files the
studio finds at run time, the trainer's source for the training environment, and no torch."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packaging"))

from frozen_layout import EXCLUDED_MODULES, bundle_datas, hidden_imports, keep_data  # noqa: E402


def test_every_page_module_is_a_hidden_import() -> None:
    from studio.gui.shell.main_window import PAGES

    hidden = set(hidden_imports(ROOT))
    assert {spec.module for spec in PAGES} <= hidden
    assert "studio.core.trainenv.installer" in hidden
    assert not any(name.startswith("studio.train") for name in hidden)


def test_the_bundle_carries_what_the_app_reads_and_the_trainer_source() -> None:
    targets = {(Path(src).relative_to(ROOT).as_posix(), dest) for src, dest in bundle_datas(ROOT)}
    assert ("pyproject.toml", ".") in targets and ("constraints/ci.txt", "constraints") in targets
    assert ("resources/trainenv/torch_builds.toml", "resources/trainenv") in targets
    assert ("presets/sd15-lora.toml", "presets") in targets
    assert ("studio/train/loop.py", "studio/train") in targets
    assert not any(src.startswith("studio/gui/") or "__pycache__" in src for src, _dest in targets)
    assert {"torch", "diffusers", "transformers", "peft", "accelerate", "onnxruntime", "studio.train",
            "studio.caption", "tests"} <= set(EXCLUDED_MODULES)
    assert not keep_data("PySide6/Qt/translations/qtbase_de.qm") and keep_data("PySide6/Qt/plugins/platforms/x")
