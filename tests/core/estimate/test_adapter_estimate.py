"""The estimate's terms of the adapter's kind (LoRA, LoHa, LoKr) and of the EMA of the trained weights."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import estimate_vram
from studio.core.hardware.machine.probe import load_hardware

GPU = load_hardware("rtx4090-24gb").gpus[0]


def _config(**sections: dict[str, Any]) -> TrainConfig:
    data: dict[str, Any] = {"model": {"family": "sdxl", "base": "models/base"}, "dataset": {"resolution": 1024},
                            "training": {"mixed_precision": "bf16", "gradient_checkpointing": True}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return TrainConfig.model_validate(data)


def test_each_network_is_counted_by_its_own_shapes() -> None:
    counts = {network: estimate_vram(_config(method={"rank": 16, "network": network}), GPU).trainable_params
              for network in ("lora", "loha", "lokr")}
    assert counts["loha"] == 2 * counts["lora"]  # two low-rank pairs
    assert counts["lokr"] < counts["lora"] / 3  # a Kronecker product: far smaller at the same rank
    # A small Kronecker factor leaves the large one larger: more parameters than the even split.
    factored = estimate_vram(_config(method={"rank": 16, "network": "lokr", "lokr_factor": 4}), GPU)
    assert factored.trainable_params > counts["lokr"]


@pytest.mark.parametrize("kind", ["lora", "dreambooth"])
def test_the_ema_is_an_fp32_copy_of_the_trained_weights_unless_it_lives_on_the_cpu(kind: str) -> None:
    plain = estimate_vram(_config(method={"kind": kind}), GPU)
    averaged = estimate_vram(_config(method={"kind": kind}, training={"ema": True}), GPU)
    part = next(p for p in averaged.parts if p.key == "ema")
    assert part.mb == pytest.approx(plain.trainable_params * 4 / 2**20)
    assert averaged.training_peak_mb == pytest.approx(plain.training_peak_mb + part.mb, rel=0.02)
    on_cpu = estimate_vram(_config(method={"kind": kind}, training={"ema": True, "ema_on_cpu": True}), GPU)
    assert all(p.key != "ema" for p in on_cpu.parts)
    assert any("EMA in CPU memory" in note for note in on_cpu.notes)
