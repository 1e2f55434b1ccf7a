"""The Model page offers model.quantized_base with its tooltip; choosing nf4 lowers the estimate a person
reads, and a choice the schema refuses is named in the form's words."""

from __future__ import annotations

import re

from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel

from studio.core.config.files.toml_file import load_config
from studio.core.config.schema import ModelSection


def _weights_gb(page) -> float:
    """The denoiser's weights row of the estimate's breakdown, in GB, as the page shows it."""
    text = page.findChild(QLabel, "estimate_breakdown").text()
    found = re.search(r"UNet2DConditionModel weights</td><td[^>]*>([\d.,]+)&nbsp;([GM]B)", text)
    assert found is not None, text
    return float(found.group(1).replace(",", "")) / (1024 if found.group(2) == "MB" else 1)


def test_choosing_a_quantized_base_in_the_form_lowers_the_estimate(make_page, qtbot) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    combo = page.form.findChild(QComboBox, "field_model_quantized_base")
    assert [combo.itemData(i) for i in range(combo.count())] == ["none", "int8", "nf4"]
    assert combo.isVisibleTo(page)
    assert combo.toolTip() == ModelSection.model_fields["quantized_base"].description + "\nAllowed: none, int8, nf4"
    total = page.findChild(QLabel, "estimate_total")
    before, weights = total.text(), _weights_gb(page)
    combo.setCurrentIndex(combo.findData("nf4"))
    combo.activated.emit(combo.currentIndex())  # as a person's pick in the list sends it
    qtbot.waitUntil(lambda: total.text() != before, timeout=3000)
    # SD1.5's UNet keeps its convolutions (two thirds of it) at full width: the weights fall by about a quarter.
    assert 0.6 * weights < _weights_gb(page) < 0.8 * weights
    assert load_config(page.context.project.config_path).model.quantized_base == "nf4"


def test_fp8_over_a_quantized_base_is_refused_in_the_forms_words(make_page) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    assert page.apply_config_changes({"model.quantized_base": "int8"})
    fp8 = page.form.findChild(QCheckBox, "field_model_fp8_base")
    fp8.click()
    assert not fp8.isChecked()
    note = page.form.findChild(QLabel, "error_model_fp8_base").text()
    assert note.startswith("⚠ Not changed:") and "choose one" in note
