"""How long the VRAM estimate takes, alone and as the Model & Preset page redoes it on a change.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/estimate_speed.py

The page recomputes the estimate, the suggestions and the fit badge of every preset on the
GUI thread whenever a field changes; the issue's budget for that is 100 ms.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    from studio.core.config.files.paths import NO_FOLDER, resolve_paths
    from studio.core.config.files.toml_file import validate_data
    from studio.core.estimate.estimate import estimate_vram
    from studio.core.hardware.machine.probe import load_hardware

    config = resolve_paths(validate_data({"model": {"family": "sd3", "base": "m/n"},
                                          "training": {"gradient_checkpointing": True}}), NO_FOLDER)
    gpu = load_hardware("rtx4090-24gb").gpus[0]
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(1000):
            estimate_vram(config, gpu)
        runs.append((time.perf_counter() - start) / 1000 * 1000)

    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from studio.core.project.folder import create_project
    from studio.gui.context import StudioContext
    from studio.gui.model.page import ModelPage

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        context = StudioContext(QSettings(str(Path(tmp) / "s.ini"), QSettings.Format.IniFormat),
                                hardware_file="rtx4090-24gb")
        page = ModelPage(context)
        context.set_project(create_project(Path(tmp) / "p"))
        app.processEvents()
        changes = []
        for batch in (2, 3, 4, 5, 6, 7, 8, 1) * 3:
            start = time.perf_counter()
            page.apply_config_changes({"training.batch_size": batch})
            page.update_estimates()
            changes.append((time.perf_counter() - start) * 1000)
        page.close()
    print(json.dumps({
        "estimate_ms_median": round(statistics.median(runs), 4),
        "page_change_ms_median": round(statistics.median(changes), 1),
        "page_change_ms_max": round(max(changes), 1),
    }))


if __name__ == "__main__":
    main()
