"""Each output file of a run is named with the programs it is for, from the family's declaration."""

from __future__ import annotations

import pytest

from studio.core.families import FAMILIES
from studio.core.families.readers import readers_of


@pytest.mark.parametrize("spec", FAMILIES, ids=lambda spec: spec.name)
def test_every_family_names_the_readers_of_each_file(spec) -> None:  # type: ignore[no-untyped-def]
    assert readers_of("run/output/pytorch_lora_weights.safetensors", spec.name) == "diffusers (load_lora_weights)"
    assert readers_of("run/output/pytorch_lora_weights_ema.safetensors", spec.name) == "diffusers (load_lora_weights)"
    assert "ComfyUI" in readers_of("run/output/mine.safetensors", spec.name)
    assert readers_of("run/output/mine.safetensors", spec.name, network="lokr") == spec.lycoris_readers
    assert readers_of("run/output/mine.safetensors", spec.name, network="locon") == spec.kohya_readers


def test_the_sd_families_files_are_for_the_uis_and_sd_scripts_and_dreambooth_for_both() -> None:
    assert readers_of("out/mine-e0002.safetensors", "sdxl") == "ComfyUI, A1111/Forge and sd-scripts"
    assert readers_of("out/mine.safetensors", "sd15", network="loha").endswith("sd-scripts with LyCORIS")
    assert readers_of("out/mine", "sd15", method="dreambooth") == "diffusers (from_pretrained)"
    assert readers_of("out/mine.safetensors", "sd15", method="dreambooth") == "A1111/Forge and ComfyUI (a checkpoint)"
    # sd-scripts has no DoRA; A1111 (and Forge before May 2025) reads a dora_scale per input column: wrong weights
    assert readers_of("out/mine.safetensors", "sdxl", dora=True) == (
        "ComfyUI and Forge of May 2025 or newer (A1111 and older Forge apply its DoRA scales wrongly)")
    assert readers_of("out/mine.safetensors", "zimage", dora=True) == "ComfyUI"
    assert readers_of("out/notes.txt", "sd15") == "" and readers_of("out/x.safetensors", "not-a-family") == ""


@pytest.mark.parametrize("spec", FAMILIES, ids=lambda spec: spec.name)
def test_a_run_named_after_the_diffusers_file_has_its_kohya_files_named_for_their_own_readers(spec) -> None:  # type: ignore[no-untyped-def]
    """output.name = "pytorch_lora_weights": the kohya file is written as pytorch_lora_weights-kohya.safetensors
    (never over the diffusers file), its EMA and epoch files as -ema and -e0002; each is for the UIs, not diffusers."""
    for name in ("pytorch_lora_weights-kohya", "pytorch_lora_weights-ema", "pytorch_lora_weights-e0002"):
        assert readers_of(f"run/output/{name}.safetensors", spec.name) == spec.kohya_readers, name
        assert readers_of(f"run/output/{name}.safetensors", spec.name, network="lokr") == spec.lycoris_readers, name
    assert readers_of("run/output/pytorch_lora_weights.safetensors", spec.name) == "diffusers (load_lora_weights)"
