"""Every numeric or choice setting of a run acts or is refused.

For each family and method, one tiny pipeline is loaded once; then each setting of the model,
method, dataset and training sections is changed from the baseline, one at a time, and either
validation refuses the change (with the key) or the first two steps' losses or the trained
weights differ from the baseline's. A setting that only changes how a run computes is declared
in the family table's NEUTRAL list, with its reason.
"""

from __future__ import annotations

import copy
import time
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from studio.core.config.errors import issues_from_validation
from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    ModelSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.families import FAMILY_NAMES, family
from studio.core.families.settings import NEUTRAL

torch = pytest.importorskip("torch")

SECTIONS = {"model": ModelSection, "method": MethodSection, "dataset": DatasetSection, "training": TrainingSection}
AXES = {"model.family", "method.kind"}  # what each test is run for
# max_steps is the baseline's length; epochs count only without it (the field says so).
LENGTH = {"training.epochs"}
# Values that make a setting's effect show in two steps of a tiny run (a generic change may not:
# a gradient norm under the clipping threshold is not clipped, one in ten captions dropped may hit none,
# min-SNR weights change only the timesteps whose SNR is above gamma). With two images a step, a random
# flip or crop has four chances to show.
FLIPS: dict[str, Any] = {
    "training.max_grad_norm": 1e-4,
    "dataset.caption_dropout": 1.0,
    "training.min_snr_gamma": 0.001,  # below every timestep's SNR: every weight changes
    "training.shift": 6.0,
    "training.noise_offset": 0.5,
    "training.max_steps": 3,
    "method.alpha": 64.0,
    "method.dropout": 0.5,
    "method.text_encoder_rank": 2,
    "dataset.resolution": 80,
    "dataset.bucket_step": 32,
    "dataset.max_bucket": 96,
    "dataset.min_bucket": 96,
    "training.text_encoder_lr": 1e-2,
    "training.learning_rate": 2e-2,
    "training.weight_decay": 0.5,
    "model.clip_skip": 2,
}
STEPS = 2
# Accepted by the schema but refused before a run starts (preflight), with what to do: edit pairs are read and
# checked by the studio, and trained once a family conditions on control images.
REFUSED_BEFORE_START = {"dataset.kind"}


def _unwrap(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def flips(baseline: TrainConfig) -> Iterator[tuple[str, Any]]:
    """(key, changed value) of every numeric or choice setting of the sections a run's losses depend on,
    changed from the baseline's value."""
    for section, model in SECTIONS.items():
        for name, field in model.model_fields.items():
            key = f"{section}.{name}"
            kind = _unwrap(field.annotation)
            current = getattr(getattr(baseline, section), name)
            if key in AXES:
                continue
            if key in FLIPS:
                yield key, FLIPS[key]
            elif kind is bool:
                yield key, not current
            elif typing.get_origin(kind) is typing.Literal:
                yield key, next(c for c in reversed(typing.get_args(kind)) if c != current)
            elif kind is int:
                yield key, (current or 0) + 1
            elif kind is float:
                yield key, (current or 0.0) + 0.5


def _write_dataset(folder: Path) -> Path:
    """Four pictures larger than the training size, of two shapes, with tag captions (crops, buckets and
    tag shuffles all have something to do) and an alpha channel (so do loss masks)."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    for i, (w, h) in enumerate([(96, 64), (64, 96), (96, 80), (80, 80)]):
        image = Image.new("RGB", (w, h), (40 * i, 90, 200 - 40 * i))
        ImageDraw.Draw(image).ellipse((8, 8, w - 16, h - 24), fill=(220, 30 + 50 * i, 30))
        alpha = Image.new("L", (w, h), 255)
        ImageDraw.Draw(alpha).rectangle((0, 0, w // 3, h), fill=0)  # a left third that dataset.masks = "alpha" hides
        image.putalpha(alpha)
        image.save(folder / f"shape{i}.png")
        (folder / f"shape{i}.txt").write_text(f"shape {i}, red, on blue, soft light", encoding="utf-8")
    return folder


class Runs:
    """Two steps of a config in this process, the pipeline loaded once per model section."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loaded: dict[str, Any] = {}
        self.count = 0

    def fingerprint(self, config: TrainConfig) -> tuple[list[float], float]:
        from accelerate.state import AcceleratorState

        from studio.train.data.batches import MicroBatches, micro_batch_loader
        from studio.train.loop import Trainer
        from studio.train.progress.reporting import Reporter
        from studio.train.runtime import make_accelerator

        self.count += 1
        run_dir = self.root / f"run-{self.count}"
        run_dir.mkdir()
        AcceleratorState._reset_state(reset_partial_state=True)
        accelerator = make_accelerator(config)
        reporter = Reporter(run_dir, True)
        trainer = Trainer(config, run_dir, accelerator, reporter)
        load = trainer.adapter.load
        key = config.model.model_dump_json()

        def cached_load(device: Any, dtype: Any) -> Any:
            # The adapter keeps what loading learned (widths, tokenizers): cached and copied with the components.
            if key not in self.loaded:
                components = load(device, dtype)
                state = {k: v for k, v in vars(trainer.adapter).items() if k not in ("config", "load")}
                self.loaded[key] = (components, state)
            components, state = copy.deepcopy(self.loaded[key])
            vars(trainer.adapter).update(state)
            return components

        trainer.adapter.load = cached_load  # type: ignore[method-assign]
        losses: list[float] = []
        try:
            trainer.setup()
            trainer_record = trainer.meter.record

            def record(step: int, epoch: int, lr: float, loss: Any, *rest: Any) -> None:
                losses.append(float(loss))
                trainer_record(step, epoch, lr, loss, *rest)  # type: ignore[misc]

            trainer.meter.record = record  # type: ignore[method-assign]
            t = trainer.config.training
            data = MicroBatches(trainer.plan, trainer.config.dataset, 0, 0, trainer.total * t.gradient_accumulation,
                                with_pixels=trainer.latent_cache is None)
            batches = iter(micro_batch_loader(data, 0, False))
            scheme = trainer.adapter.noise_scheme(trainer.components)
            trainer.meter.start()
            for _ in range(min(STEPS + 1 if t.max_steps == FLIPS["training.max_steps"] else STEPS, trainer.total)):
                trainer._train_step(batches, scheme, trainer.components)
            weights = sum(float(p.detach().double().sum()) for group in trainer.trainable for p in group)
            if trainer.ema is not None:  # what a run with training.ema saves beside the weights
                weights += trainer.ema.checksum()
        finally:
            trainer.stop.uninstall()
            reporter.close()
        return losses, weights


def _baseline(name: str, kind: str, base: Path, data: Path, out: Path) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family=name, base=str(base)),
        method=MethodSection(kind=kind, **({"rank": 4} if kind == "lora" else {})),  # type: ignore[arg-type]
        # Buckets with room to differ from a square crop: sides from 64 px in steps of 16 under 96x96 px.
        dataset=DatasetSection(concepts=[ConceptSection(path=str(data))], resolution=96, buckets=True, bucket_step=16,
                               min_bucket=64),
        training=TrainingSection(batch_size=2, max_steps=STEPS, learning_rate=1e-3, seed=1),
        output={"dir": str(out)},  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def flip_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from studio.train.pipelines.tiny import build_tiny_pipeline

    root = tmp_path_factory.mktemp("flip-models")
    # The families with a T5 get it, so that turning it on has an encoder to load.
    return {name: build_tiny_pipeline(name, root / name, **({"t5": True} if family(name).setting("model.use_t5")
                                                               else {}))
            for name in FAMILY_NAMES}


@pytest.fixture(scope="module")
def flip_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_dataset(tmp_path_factory.mktemp("flip-data") / "shapes")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lora", "dreambooth"])
@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_every_setting_acts_or_is_refused(name: str, kind: str, flip_models: dict[str, Path], flip_data: Path,
                                          tmp_path: Path) -> None:
    if kind not in family(name).methods:  # refused by validation, with the methods it trains
        with pytest.raises(ValidationError, match=r"trains .* with lora only"):
            _baseline(name, kind, flip_models[name], flip_data, tmp_path / "runs")
        return
    started = time.monotonic()
    baseline = _baseline(name, kind, flip_models[name], flip_data, tmp_path / "runs")
    runs = Runs(tmp_path)
    reference = runs.fingerprint(baseline)
    assert reference == runs.fingerprint(baseline), "the baseline is not reproducible: the test could not tell"
    assert len(reference[0]) == STEPS
    silent, refused, acted = [], [], []
    for key, value in flips(baseline):
        if key in NEUTRAL or key in LENGTH:
            continue
        section, field = key.split(".")
        data = baseline.model_dump()
        data[section][field] = value
        if key in REFUSED_BEFORE_START:
            from studio.core.project.preflight import check_dataset

            assert check_dataset(TrainConfig.model_validate(data)) is not None, f"{key} = {value!r} not refused"
            refused.append(key)
            continue
        try:
            config = TrainConfig.model_validate(data)
        except ValidationError as exc:
            issues = issues_from_validation(exc, TrainConfig)
            # The refusal names the key, or the setting the change leaves without effect (and this key with it).
            assert len(issues) == 1 and key in (issues[0].key, *issues[0].message.split()), \
                f"{key} = {value!r} refused as {issues}"
            refused.append(key)
            continue
        if runs.fingerprint(config) == reference:
            silent.append(f"{key} = {value!r}")
        else:
            acted.append(key)
    print(f"\n{name}/{kind}: {len(acted)} acted, {len(refused)} refused, {runs.count} runs in "
          f"{time.monotonic() - started:.1f} s")
    assert silent == [], f"{name}/{kind}: accepted but changed nothing: {silent}"
    assert acted, "no setting acted: the harness measures nothing"


def test_the_neutral_settings_are_settings_with_reasons() -> None:
    keys = {f"{s}.{n}" for s, m in SECTIONS.items() for n in m.model_fields}
    for key, reason in NEUTRAL.items():
        assert key in keys and len(reason) > 20, key


def test_the_sd3_run_with_ddpm_settings_is_refused(flip_models: dict[str, Path], flip_data: Path,
                                                   tmp_path: Path) -> None:
    data = _baseline("sd3", "lora", flip_models["sd3"], flip_data, tmp_path).model_dump()
    data["training"].update(noise_offset=0.5, min_snr_gamma=5.0)
    data["model"]["prediction_type"] = "v_prediction"
    with pytest.raises(ValidationError, match="acts only for family"):
        TrainConfig.model_validate(data)
