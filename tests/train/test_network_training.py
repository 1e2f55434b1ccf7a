"""The trained networks themselves: what a step trains is what the samples and the file apply.

With method.dropout, a LoHa and a LoKr drop whole rows of their weight difference while training; the kept
rows are scaled up so that the average change training sees is the whole change the samples (eval mode) and
the written file apply, as a LoRA's dropout is.
"""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.schema import MethodSection

torch = pytest.importorskip("torch")


def _adapted_linear(network: str, dropout: float) -> Any:
    from peft import inject_adapter_in_model

    from studio.train.networks.lycoris import adapter_config

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    method = MethodSection(network=network, rank=4, dropout=dropout)
    inject_adapter_in_model(adapter_config(method, ["0"], 4, 4.0), model)
    with torch.no_grad():  # a trained network: every factor away from its zero start
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.normal_(std=0.5)
    return model


@pytest.mark.parametrize("network", ["loha", "lokr"])
def test_dropout_trains_the_strength_the_samples_apply(network: str) -> None:
    model = _adapted_linear(network, dropout=0.5)
    x = torch.randn(8, 64)
    with torch.no_grad():
        base = model[0].get_base_layer()(x)
        model.eval()
        applied = model(x) - base  # the change a sample (and the written file) makes
        model.train()
        trained = torch.stack([model(x) - base for _ in range(400)]).mean(0)  # what the steps saw, on average
    ratio = float((trained * applied).sum() / (applied * applied).sum())
    assert ratio == pytest.approx(1.0, abs=0.1), f"training saw {ratio:.2f} of the {network}'s applied strength"
