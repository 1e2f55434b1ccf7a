"""The Model page says, before Train, when a single checkpoint file needs the internet at its first run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fixtures.checkpoints import ODD_SD15, SD3_MEDIUM, write_checkpoint
from PySide6.QtWidgets import QLabel

from studio.core.models.files import HUB_CONFIGS_NOTE


def test_a_checkpoint_of_no_known_kind_is_shown_needing_the_internet_once(make_page, tmp_path: Path) -> None:
    page = make_page()
    odd = write_checkpoint(tmp_path / "tiny-merge.safetensors", ODD_SD15)
    page.choose_base(str(odd))
    status = page.findChild(QLabel, "model_base_status").text()
    assert status == f"✓ SD 1.x/2.x model: {odd} ({HUB_CONFIGS_NOTE})"


def test_sd3_medium_is_shown_needing_the_internet_once_its_t5_is_on(make_page, tmp_path: Path) -> None:
    page = make_page()
    sd3 = write_checkpoint(tmp_path / "sd3_medium_incl_clips.safetensors", SD3_MEDIUM)
    page.choose_base(str(sd3))
    status = page.findChild(QLabel, "model_base_status")
    assert page.config.model.family == "sd3" and status.text() == f"✓ SD3 medium checkpoint: {sd3}"
    assert page.apply_config_changes({"model.use_t5": True})
    assert "with use_t5 on, the T5 encoder's config and tokenizer come from the Hugging Face hub" in status.text()
    assert "internet once" in status.text()


def test_in_the_desktop_app_a_hub_model_to_download_names_the_list_not_a_command(
        make_page, monkeypatch: pytest.MonkeyPatch) -> None:
    page = make_page()
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # the desktop app ships no studio-train
    assert page.apply_config_changes({"model.base": "someone/not-downloaded-model"})
    # The list below holds the models the studio knows: this one is not there, and Train offers to download it.
    assert page.findChild(QLabel, "model_base_status").text() == (
        "Hub id someone/not-downloaded-model: not on this machine yet; Train offers to download it.")
    assert page.apply_config_changes({"model.base": "stable-diffusion-v1-5/stable-diffusion-v1-5"})
    assert page.findChild(QLabel, "model_base_status").text() == (
        "Hub id stable-diffusion-v1-5/stable-diffusion-v1-5: not on this machine yet. Download it from the list "
        "below before training.")


def test_a_single_file_for_a_family_that_trains_from_folders_is_shown_refused(make_page, tmp_path: Path) -> None:
    """Z-Image's diffusion model alone (ComfyUI's layout): ✗ with why and what to do, not ✓ Found."""
    page = make_page()
    assert page.apply_config_changes({"model.family": "zimage"})
    transformer_only = write_checkpoint(tmp_path / "z_image_turbo_bf16.safetensors",
                                        {"layers.0.attention.qkv.weight": [2, 2]})
    assert page.apply_config_changes({"model.base": str(transformer_only)})
    status = page.findChild(QLabel, "model_base_status").text()
    assert status.startswith("✗ z_image_turbo_bf16.safetensors is a single checkpoint file: Z-Image trains from a "
                             "diffusers folder or hub id"), status


def test_a_folder_of_fp16_files_only_is_shown_needing_the_variant(make_page, tmp_path: Path) -> None:
    page = make_page()
    folder = tmp_path / "sd15-fp16"
    write_checkpoint(folder / "unet" / "diffusion_pytorch_model.fp16.safetensors", {"a": [4]})
    (folder / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')
    assert page.apply_config_changes({"model.base": str(folder)})
    status = page.findChild(QLabel, "model_base_status")
    assert status.text() == ("✗ sd15-fp16 holds unet's weights only as fp16 files "
                             "(diffusion_pytorch_model.fp16.safetensors): set the variant to fp16, or download the "
                             "model's full-precision files.")
    assert page.apply_config_changes({"model.variant": "fp16"})
    assert status.text().startswith("✓ SD 1.x/2.x model:")
