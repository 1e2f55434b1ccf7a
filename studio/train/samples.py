"""Sample images during training and DreamBooth class images, made by the family's pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from studio.core.config.schema import TrainConfig
from studio.core.dataset.image_headers import IMAGE_EXTENSIONS
from studio.core.runs.events import Sample
from studio.core.runs.folders import SAMPLES_DIR
from studio.train.components import Components
from studio.train.families.base import FamilyAdapter
from studio.train.reporting import Reporter


def _pipeline(adapter: FamilyAdapter, components: Components) -> Any:
    pipeline = adapter.make_pipeline(components)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def make_samples(
    adapter: FamilyAdapter, components: Components, run_dir: Path, step: int, reporter: Reporter
) -> list[Path]:
    """One PNG per prompt at the fixed sample seed (rank 0 only), announced by a `sample` event."""
    config = adapter.config
    prompts = config.sampling.prompts
    if not prompts:
        return []
    folder = run_dir / SAMPLES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    size = config.sampling.size or config.dataset.resolution
    trained = [m for m in (components.denoiser, *components.text_encoders) if m.training]
    for module in trained:
        module.eval()
    pipeline = _pipeline(adapter, components)
    paths: list[Path] = []
    try:
        for index, prompt in enumerate(prompts):
            reporter.phase("sampling", index, len(prompts), f"step {step}")
            generator = torch.Generator("cpu").manual_seed(config.sampling.seed)
            with torch.no_grad():
                image = adapter.generate(pipeline, prompt, generator, size)
            path = folder / f"step-{step:06d}-{index}.png"
            image.save(path)
            paths.append(path)
    finally:
        for module in trained:
            module.train()
    reporter.emit(Sample(step=step, images=[str(p) for p in paths], prompts=list(prompts)))
    return paths


def count_images(folder: Path) -> int:
    if not folder.is_dir():
        return 0
    return sum(1 for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())


def ensure_class_images(
    adapter: FamilyAdapter, components: Components, config: TrainConfig, run_dir: Path,
    writer: bool, reporter: Reporter,
) -> TrainConfig:
    """Generate the DreamBooth class images that are missing (with the base model, before training).

    A concept without class_path gets RUN_DIR/class_images/concept-N. Only `writer` generates;
    the caller waits for it on every rank.
    """
    out = config.model_copy(deep=True)
    for number, concept in enumerate(out.dataset.concepts):
        if not concept.uses_prior_preservation or out.method.kind != "dreambooth":
            continue
        folder = Path(concept.class_path) if concept.class_path else run_dir / "class_images" / f"concept-{number}"
        concept.class_path = str(folder)
        missing = concept.num_class_images - count_images(folder)
        if missing <= 0 or not writer:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        pipeline = _pipeline(adapter, components)
        existing = count_images(folder)
        for index in range(missing):
            reporter.phase("class_images", index, missing, concept.class_prompt or "")
            generator = torch.Generator("cpu").manual_seed(out.training.seed + existing + index)
            with torch.no_grad():
                image = adapter.generate(pipeline, concept.class_prompt or "", generator, out.dataset.resolution)
            image.save(folder / f"class-{existing + index:05d}.png")
        reporter.phase("class_images", missing, missing, f"{missing} class images written to {folder}")
    return out
