"""model.blocks_to_swap in a config: where it acts, and the refusals that name what to do instead."""

from __future__ import annotations

import pytest

from studio.core.config.errors import ConfigError
from studio.core.config.files.toml_file import validate_data
from studio.core.families import FAMILIES


def _refusal(data: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_data(data)
    return caught.value.describe()


def test_it_acts_for_the_transformer_families_only() -> None:
    served = {spec.name for spec in FAMILIES if spec.setting("model.blocks_to_swap") is not None}
    assert served == {spec.name for spec in FAMILIES if spec.denoiser == "transformer"}
    assert {"flux2-klein", "zimage", "sd3", "qwen-image"} <= served
    config = validate_data({"model": {"family": "qwen-image", "base": "Qwen/Qwen-Image", "blocks_to_swap": 40}})
    assert config.model.blocks_to_swap == 40


@pytest.mark.parametrize("name", ["sd15", "sdxl"])
def test_a_unet_family_refuses_it_with_what_to_use(name: str) -> None:
    text = _refusal({"model": {"family": name, "base": "m", "blocks_to_swap": 4}})
    assert "model.blocks_to_swap" in text and "training.gradient_checkpointing" in text


def test_a_full_fine_tune_refuses_it() -> None:
    text = _refusal({"model": {"family": "sd3", "base": "m", "blocks_to_swap": 4}, "method": {"kind": "dreambooth"}})
    assert "model.blocks_to_swap" in text and "method.kind = lora" in text


@pytest.mark.parametrize(("base", "blocks"), [("black-forest-labs/FLUX.2-klein-base-9B", 32),
                                              ("black-forest-labs/FLUX.2-klein-base-4B", 25)])
def test_every_block_of_the_model_is_too_many_and_the_limit_is_named(base: str, blocks: int) -> None:
    validate_data({"model": {"family": "flux2-klein", "base": base, "blocks_to_swap": blocks - 1}})
    text = _refusal({"model": {"family": "flux2-klein", "base": base, "blocks_to_swap": blocks}})
    assert "model.blocks_to_swap" in text and f"has {blocks} blocks" in text and f"at most {blocks - 1}" in text


def test_compiling_the_swapped_blocks_is_refused() -> None:
    text = _refusal({"model": {"family": "zimage", "base": "m", "blocks_to_swap": 4},
                     "training": {"compile": "blocks"}})
    assert "training.compile" in text and "model.blocks_to_swap" in text


def test_a_negative_count_is_refused() -> None:
    assert "model.blocks_to_swap" in _refusal({"model": {"family": "sd3", "base": "m", "blocks_to_swap": -1}})


def test_a_full_fine_tune_is_offered_what_it_accepts_instead() -> None:
    # The refusal once offered model.fp8_base to a DreamBooth run, which refuses fp8 in turn.
    dreambooth = {"model": {"family": "sd3", "base": "m"}, "method": {"kind": "dreambooth"}}
    text = _refusal({**dreambooth, "model": {**dreambooth["model"], "blocks_to_swap": 4}})
    assert "training.gradient_checkpointing" in text
    validate_data({**dreambooth, "training": {"gradient_checkpointing": True}})
    assert "model.fp8_base" not in text.replace("a LoRA also with model.fp8_base", "")
    _refusal({**dreambooth, "model": {**dreambooth["model"], "fp8_base": True}})  # why it is offered to a LoRA only
