"""Every family that builds its own full-size networks gives them by one call, `components(family, device, size=)`,
as the GPU benchmarks and `studio-train tiny --full-size` ask for them."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


@pytest.mark.parametrize("family", ["flux2-klein", "zimage", "qwen-image"])
def test_the_full_size_networks_of_a_transformer_family_come_from_one_call(family: str) -> None:
    from studio.train.pipelines.full_size import components

    parts = components(family, "meta")  # Qwen-Image's took the device for its size: a TypeError
    assert set(parts) == {"transformer", "vae", "text_encoder"}
    assert all(p.device.type == "meta" for p in parts["transformer"].parameters())
