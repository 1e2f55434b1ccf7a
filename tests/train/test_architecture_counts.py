"""The architecture sizes the GUI's VRAM estimate reads match the real diffusers/transformers classes."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _counter() -> ModuleType:
    return load_script("benchmarks/count_parameters.py")


@pytest.fixture(scope="module")
def counter() -> ModuleType:
    return _counter()


@pytest.mark.parametrize("family", ["sd15", "sdxl", "sd3"])
def test_stored_counts_match_the_real_classes(counter: ModuleType, family: str) -> None:
    stored = json.loads((ROOT / "resources" / "architectures" / f"{family}.json").read_text())
    fresh = counter.count_family(family, activations=False)
    assert fresh["components"] == stored["components"], (
        f"resources/architectures/{family}.json is stale: run `python benchmarks/count_parameters.py {family}`")


def test_known_sizes(counter: ModuleType) -> None:
    # Published sizes: SD1.5 UNet 859.5 M, SDXL UNet 2.567 B, SD3-medium MMDiT 2.028 B, T5-XXL encoder 4.76 B.
    sizes = {f: json.loads((ROOT / "resources" / "architectures" / f"{f}.json").read_text())["components"]
             for f in ("sd15", "sdxl", "sd3")}
    assert sizes["sd15"]["unet"]["params"] == 859_520_964
    assert sizes["sdxl"]["unet"]["params"] == 2_567_463_684
    assert round(sizes["sd3"]["transformer"]["params"] / 1e9, 3) == 2.028
    assert round(sizes["sd3"]["text_encoder_3"]["params"] / 1e9, 2) == 4.76


def test_activation_count_is_reproducible(counter: ModuleType) -> None:
    stored = json.loads((ROOT / "resources" / "architectures" / "sd15.json").read_text())["activations_mb"]
    fresh = counter.activation_bytes("sd15", "lora", True, "fp32") / 2**20
    assert fresh == pytest.approx(stored["lora_checkpointing_fp32"], rel=0.01)


def test_per_image_and_per_model_bytes_are_reproducible(counter: ModuleType) -> None:
    # Batch 2 minus batch 1 is per image; the rest, held once, is the 16-bit copies of the fp32 weights.
    arch = json.loads((ROOT / "resources" / "architectures" / "sd15.json").read_text())
    per_image, per_model = counter.split_activation_bytes("sd15", "full", True, "mixed")
    assert per_image / 2**20 == pytest.approx(arch["activations_mb"]["full_checkpointing_mixed"], rel=0.01)
    assert per_model / 2**20 == pytest.approx(arch["model_copies_mb"]["full_checkpointing_mixed"], rel=0.01)


@pytest.mark.parametrize(("family", "size"), [("flux2-klein", "4b"), ("zimage", None), ("qwen-image", None)])
def test_stored_transformer_counts_match_the_real_classes(family: str, size: str | None) -> None:
    """The transformer families' files (benchmarks/count_transformer_family.py), the layers model.quantized_base
    quantizes among them, against the classes built from the published configs on the meta device."""
    from studio.train.pipelines.counting import counting_of

    counter = load_script("benchmarks/count_transformer_family.py")
    spec = counting_of(family)
    stored = json.loads((ROOT / "resources" / "architectures" / f"{spec.file_name(size)}.json").read_text())
    fresh = counter.count_variant(spec, size, activations=False)
    assert fresh["components"] == stored["components"], (
        f"resources/architectures/{spec.file_name(size)}.json is stale: run "
        f"`python benchmarks/count_transformer_family.py {family}`")
    assert fresh["components"]["transformer"]["quantizable"]["params"] > 0.99 * fresh["components"]["transformer"]["params"]
