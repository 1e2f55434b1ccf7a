"""The Model & Preset page shows the system RAM beside the VRAM figure, against the machine's memory."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtWidgets import QLabel

from studio.core.config.files.presets import get_preset
from studio.core.hardware.machine.probe import find_profile
from studio.gui.model.page import ModelPage


def _shown(page: ModelPage) -> str:
    label = page.findChild(QLabel, "estimate_total")
    return label.text().replace("&nbsp;", " ")


def test_the_estimate_shows_ram_of_the_machines_memory_under_the_vram(qtbot, make_page) -> None:
    page = make_page("rtx3060-12gb")
    page.choose_preset(get_preset("zimage-lora-12gb"))
    qtbot.waitUntil(lambda: "14.3 GB of 32 GB" in _shown(page), timeout=3000)
    vram, ram = _shown(page).split("<br>", 1)
    assert vram.startswith("<b>Estimated peak: ") and "on NVIDIA GeForce RTX 3060" in vram
    assert ram == "RAM: 14.3 GB of 32 GB (peak while the model loads)"
    assert "Largest model file being read: 11.46 GB" in page.findChild(QLabel, "estimate_total").toolTip()


def test_a_machine_with_little_ram_is_marked_and_told_what_it_needs(qtbot, make_page, tmp_path: Path) -> None:
    small = json.loads(find_profile("rtx3060-12gb").read_text(encoding="utf-8")) | {"ram_mb": 8192}
    (tmp_path / "small.json").write_text(json.dumps(small), encoding="utf-8")
    page = make_page(str(tmp_path / "small.json"))
    page.choose_preset(get_preset("zimage-lora-12gb"))
    qtbot.waitUntil(lambda: "14.3 GB of 8 GB" in _shown(page), timeout=3000)
    ram = _shown(page).split("<br>", 1)[1]
    assert ram.startswith("<b>✗ RAM: 14.3 GB of 8 GB (peak while the model loads)</b><br><small>The run needs "
                          "about 14.3 GB of system RAM")
    assert ram.endswith("this model needs 14.3 GB of RAM; this machine has 8 GB: add memory, use a machine with "
                        "more, or choose a smaller model.</small>")
