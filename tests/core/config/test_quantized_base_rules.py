"""model.quantized_base is refused, naming the key and the way out, wherever a quantized base cannot carry
the run; files without it load as before (a full-precision base)."""

from __future__ import annotations

import pytest

from studio.core.config.errors import ConfigError
from studio.core.config.files.toml_file import validate_data


def _refusal(model: dict, method: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_data({"model": {"family": "sdxl", "base": "m", **model}, "method": method})
    return caught.value.describe()


@pytest.mark.parametrize(("model", "method", "words"), [
    ({"quantized_base": "nf4"}, {"kind": "dreambooth"}, "applies to LoRA runs; a full fine-tune (dreambooth)"),
    ({"quantized_base": "int8"}, {"use_dora": True}, "cannot be combined with method.use_dora = true"),
    ({"quantized_base": "int8", "fp8_base": True}, {}, "set model.fp8_base = false, or model.quantized_base"),
    ({"quantized_base": "nf4"}, {"network": "loha"}, "cannot carry a loha (method.network)"),
    ({"quantized_base": "nf4"}, {"network": "lokr"}, "use int8, or a lora or locon"),
])
def test_a_quantized_base_where_it_cannot_work_is_refused_with_the_way_out(model: dict, method: dict,
                                                                         words: str) -> None:
    text = _refusal(model, method)
    assert f'model.quantized_base = "{model["quantized_base"]}"' in text and words in text


@pytest.mark.parametrize(("quantized", "method"), [
    ("none", {"kind": "dreambooth"}), ("int8", {"network": "loha"}), ("int8", {"network": "lokr"}),
    ("nf4", {"network": "locon"}), ("nf4", {})])
def test_the_combinations_that_work_are_accepted(quantized: str, method: dict) -> None:
    config = validate_data({"model": {"family": "sdxl", "base": "m", "quantized_base": quantized}, "method": method})
    assert config.model.quantized_base == quantized


def test_a_file_without_the_key_keeps_a_full_precision_base() -> None:
    config = validate_data({"model": {"family": "sdxl", "base": "m", "fp8_base": True}})
    assert config.model.quantized_base == "none" and config.model.fp8_base


def test_an_unknown_kind_names_the_allowed_ones() -> None:
    text = _refusal({"quantized_base": "int4"}, {})
    assert "model.quantized_base" in text and "'none', 'int8' or 'nf4'" in text
