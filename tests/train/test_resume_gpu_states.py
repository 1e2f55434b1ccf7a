"""A run resumed with fewer GPUs visible than it was saved with (other launch.gpu_ids, another machine).

accelerate keeps the random state of every GPU the saving process saw; the resumed process restores the
states of the GPUs it has. CUDA is simulated: a process that sees one GPU, whose generators are recorded.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from studio.train.saving import checkpoints


def test_a_checkpoint_saved_seeing_two_gpus_resumes_on_one(monkeypatch: pytest.MonkeyPatch) -> None:
    generators: dict[int, torch.Tensor] = {}

    def set_rng_state(state: torch.Tensor, device: int | str = "cuda") -> None:
        index = device if isinstance(device, int) else 0
        if index >= 1:  # torch.cuda.default_generators[index] of a process with one GPU
            raise IndexError("tuple index out of range")
        generators[index] = state

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
    # As torch does it: each state in turn, on the GPU of its place in the list.
    monkeypatch.setattr(torch.cuda, "set_rng_state_all",
                        lambda states: [set_rng_state(s, i) for i, s in enumerate(states)])
    saved = [torch.full((8,), 1, dtype=torch.uint8), torch.full((8,), 2, dtype=torch.uint8)]

    checkpoints._restore_random_states({"random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
                                        "torch_manual_seed": torch.get_rng_state(), "torch_cuda_manual_seed": saved})

    assert list(generators) == [0] and torch.equal(generators[0], saved[0])
