"""A text encoder sharded by FSDP2 gets a class of its own; transformers finds the layer outputs it can return
(`output_hidden_states`: SDXL's and SD3's penultimate layer, clip_skip) by the class, so the studio registers
them again for the new one (studio/train/memory/sharding.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import CLIPTextConfig, CLIPTextModel
from transformers.utils import output_capturing

from studio.train.memory.sharding import _keep_output_capture


def _encoder() -> CLIPTextModel:
    torch.manual_seed(0)
    return CLIPTextModel(CLIPTextConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                        num_attention_heads=2, max_position_embeddings=16))


def _as_sharded(model: CLIPTextModel) -> None:
    """The class FSDP2's fully_shard gives a module: a subclass of its own, named after it."""
    model.__class__ = type(f"FSDP{type(model).__name__}", (type(model),), {})


def test_a_sharded_text_encoder_still_returns_its_hidden_states() -> None:
    model = _encoder()
    _as_sharded(model)
    _keep_output_capture(model)
    out = model(torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert out.hidden_states is not None and len(out.hidden_states) == 4  # the embeddings and three layers


def test_with_transformers_up_to_5_17_the_capture_is_kept_where_transformers_reads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers 5.17 (the GPU machine's) keeps the capture in a plain dict under the class's name and reads
    it there (`_CAN_RECORD_REGISTRY.get(str(self.__class__))`); the studio wrote it under the model object, so a
    sharded SDXL or SD3 text encoder returned no hidden states and the step failed on them."""
    model = _encoder()
    flags = model._can_record_outputs
    assert flags
    registry: dict[object, object] = {}
    monkeypatch.setattr(output_capturing, "_CAN_RECORD_REGISTRY", registry)
    _as_sharded(model)
    _keep_output_capture(model)
    assert registry.get(str(model.__class__)) == flags
