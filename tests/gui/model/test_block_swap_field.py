"""model.blocks_to_swap on the Model page: offered for the transformer families only, explained by its tooltip,
and a count typed in moves GBs out of the estimated peak into system RAM, as the breakdown says."""

from __future__ import annotations

import re

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSpinBox

from studio.core.config.files.toml_file import load_config
from studio.core.config.schema import field_descriptions


def _gb(text: str, pattern: str) -> float:
    found = re.search(pattern + r"([\d.,]+)&nbsp;([GM]B)", text) or re.search(pattern + r"([\d.,]+) ([GM]B)", text)
    assert found is not None, text
    return float(found.group(1).replace(",", "")) / (1024 if found.group(2) == "MB" else 1)


def test_the_field_is_offered_where_it_acts_and_its_count_moves_the_estimate(make_page, qtbot) -> None:
    page = make_page("rtx4090-24gb")
    page.form.show_advanced.setChecked(True)
    spin = page.form.editors["model.blocks_to_swap"]
    assert isinstance(spin, QSpinBox)
    assert not spin.isVisibleTo(page)  # the project's SD1.5 is a UNet: nothing to swap
    assert page.choose_family("qwen-image")
    assert spin.isVisibleTo(page)
    assert field_descriptions()["model.blocks_to_swap"] in spin.toolTip()
    total = page.findChild(QLabel, "estimate_total")
    qtbot.waitUntil(lambda: page.estimate.estimate is not None and page.estimate.estimate.family == "qwen-image",
                    timeout=5000)
    before = total.text()

    spin.setFocus()
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin.lineEdit(), "40")
    qtbot.keyClick(spin.lineEdit(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: total.text() != before, timeout=3000)
    assert load_config(page.context.project.config_path).model.blocks_to_swap == 40
    # 40 of Qwen-Image's 60 blocks: GBs off the GPU, two of them back while they run.
    assert _gb(before, "Estimated peak: ") - _gb(total.text(), "Estimated peak: ") > 20
    breakdown = page.findChild(QLabel, "estimate_breakdown").text()
    assert "Swapped blocks on their way" in breakdown
    assert re.search(r"model.blocks_to_swap: 40 blocks \([\d.]+ GB\) wait in pinned system memory, [\d.]+ GB less "
                     r"on the GPU; their copies add up to [\d.]+ s a step", breakdown), breakdown
    assert page.estimate.ram_estimate is not None
    assert page.estimate.ram_estimate.mb("swapped_blocks", "training") > 20 * 1024
