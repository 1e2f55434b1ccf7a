"""Learning is real: the loss on a fixed held-out batch (fixed noise and timesteps) falls clearly."""

from __future__ import annotations

import pytest

from studio.core.config.schema import MethodSection, TrainingSection
from studio.core.dataset.demo_shapes import write_demo_dataset

torch = pytest.importorskip("torch")


def test_held_out_loss_falls(make_config, run_training, held_out_loss, tmp_path) -> None:
    held_out = tmp_path / "held-out"
    write_demo_dataset(held_out, count=8, size=64, seed=99)
    config = make_config(
        method=MethodSection(kind="lora", rank=8),
        training=TrainingSection(batch_size=4, max_steps=40, learning_rate=1e-2, seed=2, lr_scheduler="constant"),
    )
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    before = held_out_loss(config, held_out, None)
    after = held_out_loss(config, held_out, run_dir / "output")
    print(f"held-out loss {before:.4f} -> {after:.4f}")
    assert after < 0.8 * before
