"""The Model & Preset page: presets update the form, suggestions show and apply, hardware profiles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixtures.checkpoints import CONV_IN, SD15, SDXL, write_checkpoint
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel, QPlainTextEdit, QPushButton, QSpinBox, QWidget

from studio.core.config.files.presets import apply_preset, get_preset, list_presets, save_user_preset
from studio.core.config.files.toml_file import load_config
from studio.core.estimate.plans.preset_estimate import estimate_preset
from studio.core.project.folder import create_project
from studio.gui.base.selftest_options import SelfTestOptions
from studio.gui.context import StudioContext
from studio.gui.model.page import ModelPage
from studio.gui.shell.application import make_settings


def test_choosing_a_preset_updates_the_form(make_page, qtbot) -> None:
    page = make_page()
    qtbot.mouseClick(page.findChild(QPushButton, "use_sdxl-lora-8gb"), Qt.MouseButton.LeftButton)
    form = page.form
    assert form.findChild(QSpinBox, "field_dataset_resolution").value() == 1024
    assert form.findChild(QComboBox, "field_training_optimizer").currentData() == "adamw8bit"
    assert form.findChild(QCheckBox, "field_training_gradient_checkpointing").isChecked()
    assert page.findChild(QComboBox, "model_family").currentData() == "sdxl"
    # The project's file follows: the person's choice survives a restart.
    saved = load_config(page.context.project.config_path)
    assert saved.model.family == "sdxl" and saved.training.optimizer == "adamw8bit"


def test_unfitting_config_shows_suggestions_and_apply_changes_it(make_page, qtbot) -> None:
    page = make_page("rtx3060-12gb")
    page.choose_preset(get_preset("sdxl-lora"))
    batch = page.form.findChild(QSpinBox, "field_training_batch_size")
    batch.setValue(4)
    qtbot.waitUntil(lambda: page.estimate.suggestions != [], timeout=3000)
    verdict = page.findChild(QLabel, "estimate_verdict").text()
    assert "Does not fit" in verdict
    last = len(page.estimate.suggestions) - 1
    expected = {}
    for s in page.estimate.suggestions:
        expected.update(s.changes)
    qtbot.mouseClick(page.findChild(QPushButton, f"apply_suggestion_{last}"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Does not fit" not in page.findChild(QLabel, "estimate_verdict").text(), timeout=3000)
    config = page.config
    for key, value in expected.items():
        section, name = key.split(".")
        assert getattr(getattr(config, section), name) == value
    assert page.estimate.suggestions == []


def test_invalid_value_is_shown_inline(make_page) -> None:
    page = make_page()
    before = page.config
    assert not page.apply_config_changes({"dataset.resolution": 1001})
    assert "dataset.resolution" in page.findChild(QLabel, "config_error").text()
    assert page.config is before


def test_no_gpu_says_so_and_a_profile_can_be_chosen(make_page, qtbot) -> None:
    page = make_page("no-gpu")
    assert "No GPU found" in page.findChild(QLabel, "hardware_status").text()
    picker = page.findChild(QComboBox, "hardware_profile")
    picker.setCurrentIndex(picker.findData("2x-rtx3090"))
    qtbot.waitUntil(lambda: page.gpu is not None, timeout=10000)
    assert page.findChild(QLabel, "hardware_status").text().startswith("2x NVIDIA GeForce RTX 3090 24 GB")


def test_the_profile_planned_for_is_kept_for_the_next_start(make_page, qtbot, monkeypatch) -> None:
    """Plan for: 2x RTX 3090, then the studio closed and started again: the page plans for it still,
    and so do the Train page's checks and the New Project wizard (they read the context's profile)."""
    monkeypatch.delenv("STUDIO_HARDWARE", raising=False)
    page = make_page(None)
    picker = page.findChild(QComboBox, "hardware_profile")
    picker.setCurrentIndex(picker.findData("2x-rtx3090"))
    qtbot.waitUntil(lambda: page.gpu is not None, timeout=10000)
    page.shutdown()
    again = make_page(None)  # the same settings file: a restart
    assert again.context.hardware_file == "2x-rtx3090"
    assert again.findChild(QComboBox, "hardware_profile").currentData() == "2x-rtx3090"
    assert again.findChild(QLabel, "hardware_status").text().startswith("2x NVIDIA GeForce RTX 3090 24 GB")
    picker = again.findChild(QComboBox, "hardware_profile")
    picker.setCurrentIndex(picker.findData(None))  # back to this machine: nothing kept
    assert again.context.hardware_file is None and not again.context.settings.contains("hardware/plan_for")


def test_changing_a_field_updates_the_estimate(make_page, qtbot) -> None:
    # Changes are coalesced by a short timer, then the estimate runs on the GUI thread
    # (its time is measured by benchmarks/estimate_speed.py, not here).
    page = make_page()
    total = page.findChild(QLabel, "estimate_total")
    before = total.text()
    page.apply_config_changes({"training.batch_size": 8})
    qtbot.waitUntil(lambda: total.text() != before, timeout=2000)
    assert _peak_gb(total.text()) > _peak_gb(before)


def _peak_gb(text: str) -> float:
    found = re.search(r"Estimated peak: ([\d.,]+)&nbsp;([GM]B)", text)
    assert found is not None, text
    return float(found.group(1).replace(",", "")) / (1024 if found.group(2) == "MB" else 1)


def test_toml_view_and_user_preset(make_page) -> None:
    page = make_page()
    page.choose_preset(get_preset("sd15-lora-6gb"))
    dialog = page.show_toml()
    text = dialog.findChild(QPlainTextEdit, "toml_view").toPlainText()
    assert 'family = "sd15"' in text and "gradient_checkpointing = true" in text
    dialog.close()
    preset = page.save_preset("My portrait LoRA")
    assert preset.user and Path(preset.path).is_file()
    assert page.findChild(QPushButton, f"use_{preset.id}") is not None


def test_self_test_counts_presets(make_page) -> None:
    page = make_page(None)
    result = page.self_test(SelfTestOptions(hardware=Path("8x-h100-80gb")))
    assert result["gpus"] == 8
    counts = result["presets_fit"]
    assert set(counts) == {"fits", "tight", "does_not_fit"}
    assert sum(counts.values()) == len(page.presets.cards) and counts["fits"] >= 10


def test_a_picked_checkpoint_shows_its_kind_and_the_family_follows_it(make_page, tmp_path: Path) -> None:
    page = make_page()
    status = page.findChild(QLabel, "model_base_status")
    assert page.config.model.family == "sd15"
    xl = write_checkpoint(tmp_path / "my-xl-model.safetensors", SDXL)
    page.choose_base(str(xl))
    assert (page.config.model.family, page.config.model.base) == ("sdxl", str(xl))
    assert page.family.currentData() == "sdxl"
    assert status.text() == f"✓ SDXL base checkpoint: {xl}"
    saved = load_config(page.context.project.config_path)
    assert (saved.model.family, saved.model.base) == ("sdxl", str(xl))

    # Typed by hand, a model of another family is named inline and the family stays.
    sd15 = write_checkpoint(tmp_path / "v1-model.safetensors", SD15)
    page.base.setText(str(sd15))
    page.base.editingFinished.emit()
    assert page.config.model.family == "sdxl"
    assert status.text() == ("✗ v1-model.safetensors is a Stable Diffusion 1.x checkpoint (SD 1.x/2.x), but the "
                             "family is SDXL: set the family to SD 1.x/2.x, or choose another model.")

    # A damaged download and an inpainting model say what is wrong; nothing is lost from the config.
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(xl.read_bytes()[:100])
    page.choose_base(str(cut))
    assert status.text().startswith(f"✗ {cut} is cut short") and page.config.model.family == "sdxl"
    inpaint = write_checkpoint(tmp_path / "inpaint.safetensors",
                               {**SD15, CONV_IN: [320, 9, 3, 3]})
    page.choose_base(str(inpaint))
    assert "is a Stable Diffusion 1.x inpainting checkpoint: the studio trains text-to-image models only" in status.text()


def test_preset_cards_show_the_promise_against_the_estimate_with_samples(make_page, qtbot) -> None:
    page = make_page("rtx3060-12gb")
    card = page.findChild(QWidget, "preset_card_sdxl-lora-8gb")
    label = card.findChild(QLabel, "preset_estimate")
    expected = estimate_preset(get_preset("sdxl-lora-8gb"), page.gpu, page.context.resolved_config(page.config))
    assert label.text() == f"promises 8 GB · estimated {expected.estimate.total_gb:.1f} GB with samples"
    assert expected.keeps_promise and card.findChild(QLabel, "fit_badge").text() == "Fits"
    assert label.toolTip().startswith("Estimated on NVIDIA GeForce RTX 3060, with sample images every 100 steps")

    # A preset whose promise the estimate breaks says so on its card.
    sdxl = apply_preset(page.config, get_preset("sdxl-lora"))
    save_user_preset("Optimistic SDXL", sdxl, min_vram_gb=4)
    page.presets.set_presets(list_presets())
    page.update_estimates()
    mine = page.findChild(QWidget, "preset_card_optimistic-sdxl").findChild(QLabel, "preset_estimate")
    assert mine.text().startswith("promises 4 GB · estimated ") and mine.text().endswith(" — over its promise")


def _type(qtbot, editor: QWidget, text: str) -> None:
    """Select what is there, type `text` and press Enter, as a person does."""
    editor.setFocus()
    target = editor.lineEdit() if isinstance(editor, QSpinBox) else editor
    target.selectAll()
    qtbot.keyClicks(target, text)
    qtbot.keyClick(target, Qt.Key.Key_Return)


@pytest.mark.parametrize(("key", "typed", "reason"), [
    ("training.min_snr_gamma", "-3", "must be more than 0 and at most 100"),
    ("dataset.resolution", "37", "must be at least 64 and at most 4096, a multiple of 8"),
    ("training.weight_decay", "lots", "(allowed: at least 0 and at most 1)"),
])
def test_a_refused_value_stays_red_with_the_reason_until_fixed(make_page, qtbot, key: str, typed: str,
                                                                reason: str) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    saved = page.context.project.config_path.read_text()
    editor = page.form.editors[key]
    _type(qtbot, editor, typed)
    shown = editor.lineEdit().text() if isinstance(editor, QSpinBox) else editor.text()
    assert shown == typed  # not snapped back
    assert editor.property("invalid") is True
    label = page.form.findChild(QLabel, "error_" + key.replace(".", "_"))
    assert label.isVisibleTo(page) and reason in label.text()
    assert page.context.project.config_path.read_text() == saved  # nothing refused reaches the file
    _type(qtbot, editor, {"training.min_snr_gamma": "5", "dataset.resolution": "768",
                          "training.weight_decay": "0.1"}[key])
    assert not editor.property("invalid") and not label.isVisibleTo(page)
    assert not page.form.has_invalid()
    section, name = key.split(".")
    assert getattr(getattr(load_config(page.context.project.config_path), section), name) == float(
        {"training.min_snr_gamma": 5, "dataset.resolution": 768, "training.weight_decay": 0.1}[key])


def test_a_contradiction_is_named_at_the_field_that_was_changed(make_page) -> None:
    page = make_page()
    assert page.apply_config_changes({"training.cache_latents": True})
    flip = page.form.editors["dataset.flip"]
    assert isinstance(flip, QCheckBox)
    flip.click()  # flip cannot follow cached latents
    assert not flip.isChecked()  # a choice goes back to the value in force…
    label = page.form.findChild(QLabel, "error_dataset_flip")
    assert "Not changed" in label.text() and "cache latents" in label.text()  # …and says why, at the field


def test_options_of_other_families_are_hidden(make_page) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)

    def shown(key: str) -> bool:
        return page.form.rows[key][1].isVisibleTo(page)

    assert not shown("model.use_t5") and not shown("training.timestep_sampling") and not shown("training.mode_scale")
    assert shown("model.clip_skip") and shown("training.min_snr_gamma")
    assert page.choose_family("sd3")
    assert shown("model.use_t5") and shown("training.logit_mean") and shown("training.timestep_sampling")
    assert not shown("model.clip_skip") and not shown("training.min_snr_gamma") and not shown("model.prediction_type")


def test_switching_family_moves_a_default_base_and_names_a_base_of_another_family(make_page, monkeypatch) -> None:
    from PySide6.QtWidgets import QMessageBox

    page = make_page()
    assert page.config.model.base == "stable-diffusion-v1-5/stable-diffusion-v1-5"
    assert page.choose_family("sdxl")
    assert page.config.model.base == "stabilityai/stable-diffusion-xl-base-1.0"  # the default followed
    assert page.apply_config_changes({"model.base": "stable-diffusion-v1-5/stable-diffusion-v1-5"})
    status = page.findChild(QLabel, "model_base_status").text()
    assert status.startswith("✗") and "SD 1.x/2.x" in status and "the family is SDXL" in status
    asked: list[str] = []  # the base is of neither family: keep it (No), and the page names it
    monkeypatch.setattr(QMessageBox, "question", lambda _p, _t, text, *a, **k: asked.append(text)
                        or QMessageBox.StandardButton.No)
    assert page.choose_family("sd3") and page.config.model.base == "stable-diffusion-v1-5/stable-diffusion-v1-5"
    assert "stable-diffusion-v1-5/stable-diffusion-v1-5 is an SD 1.x/2.x model; SD3 trains from SD3 models" in asked[0]
    assert "the family is SD3" in page.findChild(QLabel, "model_base_status").text()


def test_estimate_sizes_never_wrap_in_a_narrow_panel(make_page) -> None:
    # "3.20 GB" stays on one line however narrow the panel gets; the descriptions wrap instead.
    from PySide6.QtGui import QTextDocument

    page = make_page()
    document = QTextDocument()
    document.setHtml(page.estimate.breakdown.text())
    document.setTextWidth(120)
    document.documentLayout().documentSize()  # lays the text out
    sizes = []
    block = document.begin()
    while block.isValid():
        if re.fullmatch(r"[\d.,]+\s*[GM]B", block.text().replace("\xa0", " ")):
            sizes.append(block.text())
            assert block.layout().lineCount() == 1, block.text()
        block = block.next()
    assert len(sizes) >= 4


def test_on_two_gpus_the_plan_shows_ddp_beside_fsdp_and_applies_fsdp(make_page, qtbot) -> None:
    page = make_page("2x-rtx3090")
    page.choose_preset(get_preset("sdxl-dreambooth"))  # AdamW, a whole copy per GPU: ~40 GB
    panel = page.gpu_plan
    qtbot.waitUntil(lambda: panel.plan is not None and panel.plan.fsdp is not None, timeout=3000)
    assert panel.isVisibleTo(page)
    plan = panel.plan
    assert page.findChild(QLabel, "gpu_plan_title").text().startswith("<b>Plan for 2 NVIDIA GeForce RTX 3090 GPUs")
    table = page.findChild(QLabel, "gpu_plan_table").text()
    assert f"{plan.ddp.total_gb:.1f} GB</td><td>✗ does not fit" in table
    assert f"{plan.fsdp.total_gb:.1f} GB</td><td>{'✓ fits' if plan.fsdp_fit == 'fits' else '⚠ tight'}" in table
    apply = page.findChild(QPushButton, "gpu_plan_apply")
    assert apply.isVisibleTo(page) and apply.text() == "Use FSDP on 2 GPUs"
    qtbot.mouseClick(apply, Qt.MouseButton.LeftButton)
    assert (page.config.launch.strategy, page.config.launch.num_processes) == ("fsdp", 2)
    assert load_config(page.context.project.config_path).launch.strategy == "fsdp"
    qtbot.waitUntil(lambda: not apply.isVisibleTo(page), timeout=3000)
    assert "This run uses FSDP" in page.findChild(QLabel, "gpu_plan_advice").text()
    assert page.findChild(QLabel, "estimate_verdict").text() != "✗ Does not fit"


def test_a_two_gpu_preset_needs_two_gpus(make_page) -> None:
    single = make_page("rtx4090-24gb")
    card = single.presets.findChild(QWidget, "preset_card_sdxl-dreambooth-2x24gb")
    assert card.findChild(QLabel, "fit_badge").text() == "Needs 2 GPUs"
    assert not single.gpu_plan.isVisibleTo(single)  # one GPU, one process: no plan to show
    pair = make_page("2x-rtx3090")
    card = pair.presets.findChild(QWidget, "preset_card_sdxl-dreambooth-2x24gb")
    assert card.findChild(QLabel, "fit_badge").text() in ("Fits", "Tight")
    assert card.findChild(QLabel, "preset_estimate").text().startswith("promises 2 × 24 GB · estimated")
    pair.choose_preset(get_preset("sdxl-dreambooth-2x24gb"))
    assert (pair.config.launch.strategy, pair.config.launch.num_processes) == ("fsdp", 2)


def test_preset_cards_and_the_estimate_say_which_batch_fits(make_page, qtbot) -> None:
    from studio.core.config.files.presets import apply_preset
    from studio.core.estimate.plans.batch_plan import plan_batch

    page = make_page("a100-80gb")
    preset = get_preset("sd15-lora")
    card = next(c for c in page.presets.cards if c.preset.id == "sd15-lora")
    expected = plan_batch(apply_preset(page.config, preset), page.gpu)
    assert expected is not None and expected.largest > 4  # an 80 GB card takes far more than the preset's batch
    badge = card.findChild(QLabel, "batch_badge")
    assert badge.text() == f"batch {expected.largest} fits"
    assert "learning rate" in badge.toolTip()
    page.choose_preset(preset)
    plan_label = page.findChild(QLabel, "estimate_batch_plan")
    qtbot.waitUntil(lambda: f"batch {expected.largest} fits" in plan_label.text(), timeout=2000)
    assert "largest batch that fits" in plan_label.text()


def test_a_project_with_the_demos_tiny_model_is_estimated_at_its_size(qtbot, tmp_path: Path, tiny_sd15: Path) -> None:
    import shutil

    project = create_project(tmp_path / "project")
    shutil.copytree(tiny_sd15, project.root / "models" / "tiny-sd15")
    config = load_config(project.config_path)
    config.model.base = "models/tiny-sd15"  # relative to the project, as the demo writes it
    project.save_config(config)
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx3060-12gb")
    context.set_project(project)
    page = ModelPage(context)
    qtbot.addWidget(page)
    qtbot.waitUntil(lambda: page.estimate.estimate is not None and page.gpu is not None, timeout=10000)
    page.update_estimates()
    total = page.findChild(QLabel, "estimate_total").text()
    assert re.search(r"Estimated peak: \d{2,3}&nbsp;MB", total), total  # a tiny model in MB, not "0.3 GB"
    assert "sized for tiny-sd15" in page.findChild(QLabel, "estimate_breakdown").text()


def test_the_adapter_kind_and_the_ema_are_edited_in_the_form_and_priced(make_page, qtbot) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)

    def shown(key: str) -> bool:
        return page.form.rows[key][1].isVisibleTo(page)

    network = page.form.findChild(QComboBox, "field_method_network")
    assert [network.itemData(i) for i in range(network.count())] == ["lora", "locon", "loha", "lokr"]
    assert not shown("method.lokr_factor") and not shown("training.ema_decay")
    total = page.findChild(QLabel, "estimate_total")
    assert page.apply_config_changes({"method.network": "lokr"})
    assert shown("method.lokr_factor") and shown("method.conv_rank")
    assert page.apply_config_changes({"method.kind": "dreambooth"})
    qtbot.waitUntil(lambda: page.estimate.estimate is not None, timeout=5000)
    before = total.text()
    assert page.apply_config_changes({"training.ema": True})
    assert shown("training.ema_decay") and shown("training.ema_on_cpu")
    qtbot.waitUntil(lambda: total.text() != before, timeout=2000)  # a full fine-tune's average is GBs
    assert _peak_gb(total.text()) > _peak_gb(before) + 2
    assert load_config(page.context.project.config_path).training.ema


def test_the_page_offers_z_image_with_its_presets_estimated_and_its_training_adapter(make_page, qtbot) -> None:
    page = make_page("rtx4090-24gb")
    families = [page.family.itemData(i) for i in range(page.family.count())]
    assert "zimage" in families
    for preset_id, promise in (("zimage-lora-16gb", 16), ("zimage-lora-24gb", 24)):
        label = page.findChild(QWidget, f"preset_card_{preset_id}").findChild(QLabel, "preset_estimate")
        expected = estimate_preset(get_preset(preset_id), page.gpu, page.context.resolved_config(page.config))
        assert label.text() == f"promises {promise} GB · estimated {expected.estimate.total_gb:.1f} GB with samples"
        assert expected.keeps_promise
    page.form.show_advanced.setChecked(True)
    adapter = page.form.editors["model.training_adapter"]
    assert not adapter.isVisibleTo(page)  # the project's SD1.5 has no training adapter
    page.choose_family("zimage")
    assert page.config.model.family == "zimage"
    assert adapter.isVisibleTo(page)


def test_dora_on_a_lokr_is_refused_in_the_forms_words(make_page) -> None:
    page = make_page()
    page.form.show_advanced.setChecked(True)
    assert page.apply_config_changes({"method.network": "lokr"})
    dora = page.form.findChild(QCheckBox, "field_method_use_dora")
    dora.click()
    assert not dora.isChecked()
    note = page.form.findChild(QLabel, "error_method_use_dora").text()
    assert note == ('⚠ Not changed: works with network = "lora" or "locon" only (a LoKr has no DoRA form): '
                    "turn use dora off, or choose one of those networks")
