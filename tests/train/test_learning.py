"""Learning is real: the loss on a fixed held-out batch (fixed noise and timesteps) falls clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config import ConceptSection, MethodSection, TrainConfig, TrainingSection
from studio.core.demo import write_demo_dataset

torch = pytest.importorskip("torch")


def held_out_loss(config: TrainConfig, folder: Path, lora_dir: Path | None) -> float:
    """The training loss of the demo pictures in `folder`, at fixed noise and timesteps."""
    from studio.train.data import collect_items, load_image
    from studio.train.families import adapter_for

    adapter = adapter_for(config)
    components = adapter.load(torch.device("cpu"), torch.float32)
    if lora_dir is not None:
        pipe = adapter.make_pipeline(components)
        pipe.load_lora_weights(str(lora_dir), weight_name="pytorch_lora_weights.safetensors")
    held_out = config.model_copy(deep=True)
    held_out.dataset.concepts = [ConceptSection(path=str(folder))]
    items = collect_items(held_out, lambda *a: None)
    pixels = torch.stack([torch.from_numpy(load_image(i, "center", False, None).pixels) for i in items])
    scheme = adapter.noise_scheme(components)
    with torch.no_grad():
        latents = adapter.encode_images(components, pixels)
        cond = adapter.encode_prompts(components, [i.caption for i in items])
        total = 0.0
        for repeat in range(4):
            noised = scheme.noise(latents, torch.Generator().manual_seed(100 + repeat))
            prediction = adapter.predict(components.denoiser, noised.noisy, noised.timesteps, cond)
            total += float(scheme.loss(prediction, noised, torch.ones(len(items))))
    return total / 4


def test_held_out_loss_falls(make_config, run_training, tmp_path) -> None:
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
