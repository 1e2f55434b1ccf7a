"""training.checkpointing_interval: gradient checkpointing of every N-th denoiser block."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


def _loss_and_grads(denoiser: Any, family: str) -> tuple[float, list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(2)
    config = denoiser.config
    noisy = torch.randn(2, int(config.in_channels), 8, 8, generator=generator)
    timesteps = torch.tensor([10, 600])
    denoiser.zero_grad(set_to_none=True)
    if family == "sd15":
        hidden = torch.randn(2, 8, int(config.cross_attention_dim), generator=generator)
        out = denoiser(noisy, timesteps, encoder_hidden_states=hidden).sample
    else:
        hidden = torch.randn(2, 8, int(config.joint_attention_dim), generator=generator)
        pooled = torch.randn(2, int(config.pooled_projection_dim), generator=generator)
        out = denoiser(hidden_states=noisy, timestep=timesteps, encoder_hidden_states=hidden,
                       pooled_projections=pooled).sample
    loss = out.pow(2).mean()
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in denoiser.parameters()]


def _blocks(denoiser: Any) -> int:
    """The units diffusers checkpoints: SD3's transformer blocks; the UNet's resnets and attention blocks."""
    from diffusers.models.attention import BasicTransformerBlock

    if hasattr(denoiser, "transformer_blocks"):
        return len(denoiser.transformer_blocks)
    parts = [*denoiser.down_blocks, denoiser.mid_block, *denoiser.up_blocks]
    resnets = sum(len(part.resnets) for part in parts) - 1  # the mid block runs its first resnet plainly
    return resnets + sum(isinstance(m, BasicTransformerBlock) for m in denoiser.modules())


@pytest.mark.parametrize("family", ["sd15", "sd3"])
def test_every_second_block_is_recomputed_and_the_gradients_are_the_same(
    family: str, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.utils.checkpoint

    from studio.core.config.schema import ModelSection, TrainConfig
    from studio.train.families import adapter_for
    from studio.train.memory.grad_checkpointing import enable_gradient_checkpointing

    config = TrainConfig(model=ModelSection(family=family, base=str(tiny_models[family])))  # type: ignore[arg-type]
    denoiser = adapter_for(config).load(torch.device("cpu"), torch.float32).denoiser.requires_grad_(True).train()
    checkpointed: list[Any] = []
    original = torch.utils.checkpoint.checkpoint

    def counting(function: Any, *args: Any, **kwargs: Any) -> Any:
        checkpointed.append(function)
        return original(function, *args, **kwargs)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", counting)
    plain_loss, plain_grads = _loss_and_grads(denoiser, family)
    assert not checkpointed
    results = {}
    for interval in (1, 2):
        model = copy.deepcopy(denoiser)
        enable_gradient_checkpointing(model, interval)
        checkpointed.clear()
        results[interval] = (_loss_and_grads(model, family), len(checkpointed))
    (loss_all, grads_all), every_block = results[1]
    (loss_half, grads_half), every_second = results[2]
    assert every_block == _blocks(denoiser) and every_second == (every_block + 1) // 2  # half recompute
    for loss, grads in ((loss_all, grads_all), (loss_half, grads_half)):
        assert loss == pytest.approx(plain_loss, rel=1e-6)
        assert all(torch.allclose(g, p, atol=1e-6, rtol=1e-5) for g, p in zip(grads, plain_grads, strict=True))
