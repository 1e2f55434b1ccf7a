"""The Model page estimates for the GPU the project trains on (launch.gpu_ids), not the machine's first."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtWidgets import QLabel

from studio.core.config.files.presets import get_preset
from studio.core.hardware.machine.probe import find_profile


def test_the_estimate_is_for_the_gpu_launch_gpu_ids_chooses(qtbot, make_page, tmp_path: Path) -> None:
    machine = json.loads(find_profile("rtx4090-24gb").read_text(encoding="utf-8"))
    second = json.loads(find_profile("rtx3060-12gb").read_text(encoding="utf-8"))["gpus"][0] | {"index": 1}
    machine["gpus"].append(second)  # a 4090 in the first slot, a 3060 in the second
    (tmp_path / "two.json").write_text(json.dumps(machine), encoding="utf-8")
    page = make_page(str(tmp_path / "two.json"))
    page.choose_preset(get_preset("zimage-lora-12gb"))
    label = page.findChild(QLabel, "estimate_total")
    qtbot.waitUntil(lambda: "on NVIDIA GeForce RTX 4090" in label.text(), timeout=3000)
    assert page.apply_config_changes({"launch.gpu_ids": "1"})
    qtbot.waitUntil(lambda: "on NVIDIA GeForce RTX 3060" in label.text(), timeout=3000)
    assert page.gpu_count == 1
