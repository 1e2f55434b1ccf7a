"""The adapter kinds (method.network) and the EMA: what each family and method accepts, refused with the key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from studio.core.config.errors import issues_from_validation
from studio.core.config.schema import TrainConfig


def _config(family: str = "sd15", **sections: dict[str, object]) -> TrainConfig:
    return TrainConfig.model_validate({"model": {"family": family, "base": "models/base"}, **sections})


@pytest.mark.parametrize("network", ["locon", "loha", "lokr"])
def test_every_unet_family_trains_every_network_on_its_convolutions(network: str) -> None:
    assert _config(method={"network": "lora"}).method.conv_rank is None
    for family in ("sd15", "sdxl"):
        config = _config(family, method={"network": network, "conv_rank": 4, "conv_alpha": 2.0})
        assert config.method.network == network and config.method.conv_rank == 4


@pytest.mark.parametrize(("sections", "key", "says"), [
    ({"method": {"network": "locon"}}, "method.network", "has none to adapt"),
    ({"method": {"network": "loha", "conv_rank": 4}}, "method.conv_rank", "acts only for family sd15, sdxl"),
])
def test_a_transformer_family_has_no_convolution_layers_to_adapt(sections: dict, key: str, says: str) -> None:
    for family in ("sd3", "flux2-klein"):
        with pytest.raises(ValidationError, match=says) as caught:
            _config(family, **sections)
        assert [issue.key for issue in issues_from_validation(caught.value, TrainConfig)] == [key]
    assert _config("sd3", method={"network": "lokr", "lokr_factor": 8}).method.lokr_factor == 8


@pytest.mark.parametrize(("method", "says"), [
    ({"lokr_factor": 8}, "acts only with method.network = \"lokr\""),
    ({"network": "loha", "lokr_factor": 8}, "acts only with method.network = \"lokr\""),
    ({"network": "loha", "use_dora": True}, "(a LoHa has no DoRA form)"),
    ({"network": "loha", "conv_alpha": 2.0}, "set method.conv_rank too"),
    ({"kind": "dreambooth", "network": "lokr"}, "acts only for method.kind = lora"),
    ({"network": "lokr", "lokr_factor": 1}, "greater than or equal to 2"),
])
def test_settings_without_effect_are_refused(method: dict, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        _config(method=method)


def test_ema_settings() -> None:
    assert _config(training={"ema": True, "ema_decay": 0.99, "ema_every": 4, "ema_on_cpu": True}).training.ema_every == 4
    with pytest.raises(ValidationError, match=r"acts only with training\.ema = true"):
        _config(training={"ema_every": 4})
    with pytest.raises(ValidationError, match="makes no samples"):
        _config(training={"ema": True, "ema_for_samples": True})
    assert _config(training={"ema": True, "ema_for_samples": True}, sampling={"every_n_steps": 10}).training.ema
    with pytest.raises(ValidationError, match=r"not available with launch\.strategy"):
        _config(method={"kind": "dreambooth"}, training={"ema": True}, launch={"strategy": "fsdp", "num_processes": 2})
