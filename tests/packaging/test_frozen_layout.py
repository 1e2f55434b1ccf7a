"""What the frozen app carries: every window module (pages load by name), the shipped files the
studio finds at run time, the trainer's source for the training environment, and no torch."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packaging"))

from frozen_layout import (  # noqa: E402
    EXCLUDED_MODULES,
    bundle_datas,
    hidden_imports,
    is_system_library,
    keep_data,
    slim_binaries,
)


def test_every_page_module_is_a_hidden_import() -> None:
    from studio.gui.shell.main_window import PAGES

    hidden = set(hidden_imports(ROOT))
    assert {spec.module for spec in PAGES} <= hidden
    assert "studio.core.trainenv.installer" in hidden
    assert not any(name.startswith("studio.train") for name in hidden)


def test_the_bundle_carries_what_the_app_reads_and_the_trainer_source() -> None:
    targets = {(Path(src).relative_to(ROOT).as_posix(), dest) for src, dest in bundle_datas(ROOT)}
    assert ("pyproject.toml", ".") in targets and ("constraints/ci.txt", "constraints") in targets
    assert ("constraints/cloud.txt", "constraints") in targets  # Install SkyPilot… pins it by this file
    assert ("resources/trainenv/torch_builds.toml", "resources/trainenv") in targets
    assert ("presets/sd15-lora.toml", "presets") in targets
    assert ("studio/train/loop.py", "studio/train") in targets
    assert not any(src.startswith("studio/gui/") or "__pycache__" in src for src, _dest in targets)
    assert {"torch", "diffusers", "transformers", "peft", "accelerate", "onnxruntime", "studio.train",
            "studio.caption", "tests"} <= set(EXCLUDED_MODULES)
    assert not keep_data("PySide6/Qt/translations/qtbase_de.qm") and keep_data("PySide6/Qt/plugins/platforms/x")


def test_the_linux_bundle_leaves_the_desktops_libraries_and_what_only_they_need() -> None:
    links = {
        "/q/libQt6Gui.so.6": ["libstdc++.so.6", "libglib-2.0.so.0", "libxkbcommon.so.0", "libicuuc.so.73"],
        "/s/libglib-2.0.so.0": ["libpcre2-8.so.0"],
        "/q/plugins/libqgtk3.so": ["libQt6Gui.so.6", "libcairo.so.2", "libpango-1.0.so.0", "libatk-1.0.so.0"],
        "/s/libcairo.so.2": ["libpixman-1.so.0", "libpng16.so.16"],
        "/s/libpango-1.0.so.0": ["libfribidi.so.0"],
        "/p/_imaging.so": ["libpng16.so.16", "libfreetype-57f805ba.so.6.20.6"],
    }
    toc = [(dest, source, "BINARY") for dest, source in [
        ("PySide6/Qt/lib/libQt6Gui.so.6", "/q/libQt6Gui.so.6"), ("libstdc++.so.6", "/s/libstdc++.so.6"),
        ("libglib-2.0.so.0", "/s/libglib-2.0.so.0"), ("libpcre2-8.so.0", "/s/libpcre2-8.so.0"),
        ("libxkbcommon.so.0", "/s/libxkbcommon.so.0"), ("libicuuc.so.73", "/q/libicuuc.so.73"),
        ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", "/q/plugins/libqgtk3.so"),
        ("libcairo.so.2", "/s/libcairo.so.2"), ("libpixman-1.so.0", "/s/libpixman-1.so.0"),
        ("libpango-1.0.so.0", "/s/libpango-1.0.so.0"), ("libfribidi.so.0", "/s/libfribidi.so.0"),
        ("libatk-1.0.so.0", "/s/libatk-1.0.so.0"), ("libpng16.so.16", "/s/libpng16.so.16"),
        ("PIL/_imaging.so", "/p/_imaging.so"), ("libfreetype-57f805ba.so.6.20.6", "/p/libfreetype-57f805ba.so.6.20.6"),
    ]]
    kept = [dest for dest, _source, _kind in slim_binaries(toc, lambda source: links.get(source, []))]
    # The system's libraries go; so do those only they or the GTK theme linked (pcre2 came with glib, cairo's
    # pixman and atk with the theme). What a kept file links stays: libpng16 for Pillow, Qt's own ICU, and the
    # wheel's private freetype, which is not the system's.
    assert kept == ["PySide6/Qt/lib/libQt6Gui.so.6", "libxkbcommon.so.0", "libicuuc.so.73", "libpng16.so.16",
                    "PIL/_imaging.so", "libfreetype-57f805ba.so.6.20.6"]
    assert is_system_library("libstdc++.so.6.0.30") and is_system_library("libz.so.1")
    assert not is_system_library("libfreetype-57f805ba.so.6.20.6") and not is_system_library("libzstd.so.1")
