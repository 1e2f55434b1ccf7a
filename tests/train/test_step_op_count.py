"""What one training step dispatches on the CPU: the op count the GPU's kernel launches follow, and no
read-back to the host inside the step (the losses are read every few steps by the step meter).

The budget is today's count with a little room: a change that adds ops to every step (a dropout at
dropout 0, a copy per LoRA layer, a `.item()` in the loop) fails here, on any machine, before a GPU
run shows it as a slower step. docs/benchmarks.md has the counts per family.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")

# Ops of optimizer step 3 on each tiny model (batch 2, 64 px, latents and text cached as the presets
# run), measured 2026-12-04 with torch 2.13 (1885, 3414, 913, 1181, 1788, Qwen-Image 971), plus 5%;
# [klein] 1125 since its position ids are made once per batch shape (1181 when made every step).
BUDGET = {"sd15": 1980, "sdxl": 3585, "sd3": 960, "flux2-klein": 1165, "zimage": 1880, "qwen-image": 1020}
HOST_READS = ("_local_scalar_dense", "item", "equal", "is_nonzero")


def count_step_ops(make_config: Any, run_training: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                   family: str, caches: bool, at_step: int = 3) -> Counter[str]:
    """The aten ops dispatched by optimizer step `at_step` of a short LoRA run of `family`'s tiny model,
    with its latents and text embeddings cached (`caches`) or encoded in the step."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from studio.train.loop import Trainer

    counts: Counter[str] = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            counts[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    original = Trainer._train_step

    def counted(self: Trainer, *args: Any) -> Any:
        if self.step != at_step - 1:
            return original(self, *args)
        with Count():
            return original(self, *args)

    monkeypatch.setattr(Trainer, "_train_step", counted)
    config = make_config(family)
    config.training.cache_latents = config.training.cache_text_embeddings = caches
    code, _ = run_training(config, tmp_path / family)
    assert code == 0
    return counts


@pytest.mark.parametrize("family", sorted(BUDGET))
def test_a_step_dispatches_no_more_ops_than_its_budget_and_reads_nothing_back(
        family: str, make_config, run_training, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = count_step_ops(make_config, run_training, tmp_path, monkeypatch, family, caches=True)
    total = sum(counts.values())
    assert total > 500  # the step ran under the counter
    assert total <= BUDGET[family], f"{total} ops, budget {BUDGET[family]}: {counts.most_common(12)}"
    assert {op: counts[op] for op in HOST_READS if counts[op]} == {}
    assert counts["dropout"] == counts["native_dropout"] == 0  # LoRA dropout 0: no dropout kernels
