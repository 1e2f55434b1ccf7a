"""Resume is exact for the settings that keep state of their own: a run stopped at step 2 and resumed ends
with the straight run's losses, validation losses, epoch LoRAs, samples and outputs, bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from studio.core.config.schema import (
    MethodSection,
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainingSection,
)
from studio.core.runs.events import (
    Checkpoint,
    EpochSaved,
    RunFinished,
    RunStarted,
    RunWarning,
    Step,
    Validation,
)

torch = pytest.importorskip("torch")


def _accumulation_across_an_epoch(make_config: Any, runs: Path) -> Any:
    # 8 images in batches of 2: an epoch is 4 micro-batches, so with 3 per step the second step ends in epoch 2.
    return make_config(
        method=MethodSection(kind="lora", rank=4, dropout=0.1, train_text_encoder=True),
        training=TrainingSection(batch_size=2, epochs=2, gradient_accumulation=3, learning_rate=2e-3,
                                 text_encoder_lr=1e-3, lr_scheduler="cosine", lr_warmup_steps=1, seed=5,
                                 noise_offset=0.1, min_snr_gamma=5.0),
        output=OutputSection(dir=str(runs), save_every_n_epochs=1, formats=["diffusers", "kohya"]),
    )


def _prodigy_validation_fp8(make_config: Any, runs: Path) -> Any:
    base = make_config()
    return make_config(
        model=ModelSection(family="sd15", base=base.model.base, fp8_base=True),
        dataset=base.dataset.model_copy(update={"validation_fraction": 0.25}),
        training=TrainingSection(batch_size=2, max_steps=5, learning_rate=1.0, optimizer="prodigy",
                                 lr_scheduler="cosine_with_restarts", lr_warmup_steps=2, seed=2,
                                 validation_every=2, gradient_checkpointing=True),
        sampling=SamplingSection(every_n_steps=2, prompts=["a red circle"], steps=1, seed=4),
        output=OutputSection(dir=str(runs), formats=["diffusers"]),
    )


def _adafactor_caches_workers(make_config: Any, runs: Path) -> Any:
    return make_config(
        training=TrainingSection(batch_size=2, max_steps=5, learning_rate=1e-2, optimizer="adafactor",
                                 lr_scheduler="linear", lr_warmup_steps=1, seed=3, cache_latents=True,
                                 cache_text_embeddings=True, dataloader_workers=1),
        output=OutputSection(dir=str(runs), formats=["diffusers"], save_every_n_steps=1, keep_last=1),
    )


def _killed_after_a_checkpoint(make_config: Any, runs: Path) -> Any:
    # Checkpoints every 2 steps; the run is "killed" at step 3 (its stop checkpoint removed): it resumes from 2.
    return make_config(
        method=MethodSection(kind="lora", rank=4, dropout=0.1),
        dataset=make_config().dataset.model_copy(update={"flip": True, "caption_dropout": 0.3}),
        training=TrainingSection(batch_size=2, max_steps=5, learning_rate=2e-3, seed=7, lr_scheduler="cosine",
                                 lr_warmup_steps=2),
        output=OutputSection(dir=str(runs), formats=["diffusers"], save_every_n_steps=2),
    )


# name: (config, the step the run is stopped after, the step it resumes from)
CASES: dict[str, tuple[Callable[[Any, Path], Any], int, int]] = {
    "accumulation across an epoch's end, text encoder, epoch LoRAs": (_accumulation_across_an_epoch, 2, 2),
    "prodigy, validation, samples, fp8 base": (_prodigy_validation_fp8, 2, 2),
    "adafactor, cached latents and text, a worker, keep_last 1": (_adafactor_caches_workers, 2, 2),
    "killed after step 3, resumed from the checkpoint of step 2": (_killed_after_a_checkpoint, 3, 2),
}


def _outputs(run_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Every weights file the run wrote under output/ (final and epoch LoRAs), by its place there."""
    return {str(p.relative_to(run_dir / "output")): load_file(str(p))
            for p in sorted((run_dir / "output").rglob("*.safetensors"))}


def _record(events: list[Any]) -> dict[str, list[Any]]:
    return {
        "losses": [(e.step, e.epoch, e.loss, e.lr) for e in events if isinstance(e, Step)],
        "validation": [(e.step, e.loss) for e in events if isinstance(e, Validation)],
        "epochs": [(e.step, e.epoch) for e in events if isinstance(e, EpochSaved)],
    }


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_stopped_and_resumed_ends_bit_for_bit_as_the_straight_run(
        case: str, make_config, run_training, events_of, stop_after, tmp_path: Path) -> None:
    import shutil

    build, stop_at, resume_at = CASES[case]
    config = build(make_config, tmp_path / "runs")
    code, straight = run_training(config, tmp_path / "a")
    assert code == 0, [e for e in events_of(straight) if e.type == "error"]
    stop_after(stop_at)
    code, resumed = run_training(config, tmp_path / "b")
    events = events_of(resumed)
    assert code == 0 and isinstance(events[-1], RunFinished) and events[-1].status == "stopped"
    assert any(isinstance(e, Checkpoint) and e.step == resume_at for e in events)
    if stop_at != resume_at:  # a kill leaves no checkpoint of the step it ended at
        shutil.rmtree(resumed / "checkpoints" / f"step-{stop_at}")
    stop_after(None)
    code, _ = run_training(None, tmp_path / "b", resume_dir=resumed)
    events = events_of(resumed)
    assert code == 0, [e for e in events if e.type == "error"]
    legs = [i for i, e in enumerate(events) if isinstance(e, RunStarted)]
    assert [events[i].resumed_from_step for i in legs] == [0, resume_at]  # type: ignore[attr-defined]
    assert not [e for e in events if isinstance(e, RunWarning) and "written by a run of" in e.message]
    # What the first leg did up to the checkpoint, then what the resumed leg did.
    kept = [e for e in events[: legs[1]] if getattr(e, "step", 0) <= resume_at] + events[legs[1]:]
    record = _record(kept)
    assert record == _record(events_of(straight))
    # Each case's own state was there to be kept.
    assert bool(record["validation"]) == bool(config.training.validation_every)
    assert bool(record["epochs"]) == bool(config.output.save_every_n_epochs)
    assert len(list((resumed / "checkpoints").iterdir())) <= config.output.keep_last
    expected, got = _outputs(straight), _outputs(resumed)
    assert got.keys() == expected.keys() and expected
    for name, tensors in expected.items():
        assert got[name].keys() == tensors.keys(), name
        assert all(torch.equal(got[name][k], t) for k, t in tensors.items()), name
    samples = sorted(p.name for p in (straight / "samples").glob("*.png")) if (straight / "samples").is_dir() else []
    assert samples == sorted(p.name for p in (resumed / "samples").glob("*.png")) if samples else True
    for name in samples:
        assert (resumed / "samples" / name).read_bytes() == (straight / "samples" / name).read_bytes(), name


@pytest.mark.parametrize(("images", "accumulation", "epochs", "steps"), [(8, 3, 2, 3), (2, 4, 10, 3), (8, 2, 3, 6)])
def test_a_run_in_epochs_trains_the_epochs_asked(images: int, accumulation: int, epochs: int, steps: int) -> None:
    """Micro-batches run on across epochs: the run's steps take its epochs' micro-batches and at most
    accumulation - 1 more (2 epochs of 4 batches at accumulation 3 were 4 steps: 3 epochs trained)."""
    from studio.train.data.batches import EpochPlan, total_steps
    from studio.train.data.items import TrainItem

    items = [TrainItem(index=i, path=Path(f"{i}.png"), caption="", repeats=1, bucket=(64, 64), size=(64, 64))
             for i in range(images)]
    plan = EpochPlan(items, batch_size=2, world_size=1, seed=0)
    total = total_steps(plan, accumulation, ("epochs", epochs))
    assert total == steps
    wanted = epochs * plan.batches_per_epoch
    assert wanted <= total * accumulation < wanted + accumulation


def test_a_resume_with_another_length_or_number_of_gpus_says_so(make_config, run_training, events_of, stop_after,
                                                                tmp_path: Path) -> None:
    """A config edited by hand, a pod with fewer GPUs or an update that counts steps otherwise: the run goes
    on from its checkpoint, and the warning names what is no longer as it was."""
    import json

    stop_after(2)
    code, run_dir = run_training(make_config(training=TrainingSection(batch_size=2, max_steps=4, seed=1)), tmp_path)
    assert code == 0 and events_of(run_dir)[-1].status == "stopped"  # type: ignore[attr-defined]
    stop_after(None)
    config = run_dir / "config.toml"
    config.write_text(config.read_text(encoding="utf-8").replace("max_steps = 4", "max_steps = 5"), encoding="utf-8")
    state_file = run_dir / "checkpoints" / "step-2" / "training_state.json"
    state = json.loads(state_file.read_text(encoding="utf-8"))
    assert state["global_batch"] == 2
    state_file.write_text(json.dumps({**state, "global_batch": 4}), encoding="utf-8")  # as two GPUs wrote it
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0 and isinstance(events[-1], RunFinished) and events[-1].step == 5
    (warning,) = [e for e in events if isinstance(e, RunWarning) and "written by a run of" in e.message]
    assert ("the checkpoint of step 2 was written by a run of 4 steps, batches of 4 images over all GPUs, gradient "
            "accumulation 1; this run has 5 steps, batches of 2 images over all GPUs, gradient accumulation 1"
            ) in warning.message
    assert str(config) in warning.hint


def stopped_and_edited(config: Any, old: str, new: str, run_training: Any, events_of: Any, stop_after: Any,
                       tmp_path: Path) -> tuple[Path, Path, str]:
    """`config` trained and stopped at step 2, then `old` replaced by `new` in its run folder's config.toml, as a
    person edits a stopped run before Resume: (the run folder, its config.toml, the text before the edit)."""
    stop_after(2)
    code, run_dir = run_training(config, tmp_path)
    assert code == 0 and events_of(run_dir)[-1].status == "stopped"
    stop_after(None)
    path = run_dir / "config.toml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    return run_dir, path, text


def test_a_learning_rate_edited_before_a_resume_is_the_one_trained_with(make_config, run_training, events_of,
                                                                       stop_after, tmp_path: Path) -> None:
    """A person lowers training.learning_rate in the stopped run's config.toml and resumes: the checkpoint's
    schedule brought the old rate back and the edit did nothing, without a word."""
    from studio.core.runs.events import Step

    training = TrainingSection(batch_size=2, max_steps=4, seed=1, learning_rate=1e-3, lr_scheduler="linear")
    run_dir, _, _ = stopped_and_edited(
        make_config(training=training),
        "learning_rate = 0.001\n", "learning_rate = 0.0005\n", run_training, events_of, stop_after, tmp_path)
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0 and isinstance(events[-1], RunFinished) and events[-1].step == 4
    # Linear over 4 steps: steps 3 and 4 train at 50 % and 25 % of the rate, now the new one.
    assert [(e.step, e.lr) for e in events if isinstance(e, Step)][-2:] == [
        (3, pytest.approx(2.5e-4)), (4, pytest.approx(1.25e-4))]
    (warning,) = [e for e in events if isinstance(e, RunWarning) and "this run's config says" in e.message]
    assert warning.message == ("the checkpoint of step 2 was written by a run at training.learning_rate = 0.001; "
                               "this run's config says training.learning_rate = 0.0005: it goes on at the new rate, "
                               "from where its schedule was")


def test_a_text_encoder_switched_off_before_a_resume_is_named_not_a_crash(make_config, run_training, events_of,
                                                                           stop_after, tmp_path: Path) -> None:
    """A person turns method.train_text_encoder off in the stopped run's config.toml and resumes: the checkpoint's
    optimizer state (two groups) met this run's (one), and the run ended as a crash with a traceback."""
    from studio.core.runs.events import Error

    method = MethodSection(kind="dreambooth", train_text_encoder=True)
    training = TrainingSection(batch_size=2, max_steps=4, seed=1, learning_rate=1e-4)
    run_dir, config, _ = stopped_and_edited(
        make_config(method=method, training=training),
        "train_text_encoder = true\n", "train_text_encoder = false\n", run_training, events_of, stop_after, tmp_path)
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    (error,) = [e for e in events_of(run_dir) if isinstance(e, Error)]
    assert code != 0 and error.kind == "config"
    assert "checkpoints/step-2 was written while other weights were trained" in error.message.replace("\\", "/")
    assert "method.train_text_encoder" in error.hint and str(config) in error.hint


def test_a_weight_decay_edited_before_a_resume_is_the_one_trained_with(make_config, run_training, events_of,
                                                                      stop_after, tmp_path: Path) -> None:
    """A person raises training.weight_decay in the stopped run's config.toml and resumes: the checkpoint's
    optimizer state brought the old value back with its parameter groups, and the edit did nothing, without
    a word."""
    training = TrainingSection(batch_size=2, max_steps=4, seed=1, learning_rate=1e-3, weight_decay=0.01)
    run_dir, _, _ = stopped_and_edited(
        make_config(training=training),
        "weight_decay = 0.01\n", "weight_decay = 0.5\n", run_training, events_of, stop_after, tmp_path)
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0 and isinstance(events[-1], RunFinished) and events[-1].step == 4
    (warning,) = [e for e in events if isinstance(e, RunWarning) and "weight_decay" in e.message]
    assert warning.message == ("the checkpoint of step 2 was written by a run at training.weight_decay = 0.01; "
                               "this run's config says 0.5: it goes on with the new weight decay")


def test_the_weight_decay_asked_outlasts_a_loaded_optimizer_state() -> None:
    """What a resume does with the groups: the checkpoint's state comes back, its weight decay does not."""
    from studio.train.saving.resume import keep_asked_decay

    weight = torch.nn.Parameter(torch.ones(3))
    old = torch.optim.AdamW([weight], lr=1e-3, weight_decay=0.01)
    weight.grad = torch.ones(3)
    old.step()
    new = torch.optim.AdamW([weight], lr=1e-3, weight_decay=0.5)
    asked = [group["weight_decay"] for group in new.param_groups]
    new.load_state_dict(old.state_dict())
    assert keep_asked_decay(new.param_groups, asked) == (0.01, 0.5)
    assert [group["weight_decay"] for group in new.param_groups] == [0.5]
    assert int(new.state[weight]["step"]) == 1
    assert keep_asked_decay(new.param_groups, asked) is None


def test_a_rank_edited_before_a_resume_is_named_not_called_damage(make_config, run_training, events_of, stop_after,
                                                                  tmp_path: Path) -> None:
    """A person lowers method.rank in the stopped run's config.toml and resumes: every checkpoint was skipped as
    "damaged" and the hint said to start a new run, though the checkpoints were whole and setting the rank back
    resumes the run."""
    from studio.core.runs.events import Error

    run_dir, config, text = stopped_and_edited(
        make_config(method=MethodSection(kind="lora", rank=16),
                    training=TrainingSection(batch_size=2, max_steps=4, seed=1)),
        "rank = 16\n", "rank = 8\n", run_training, events_of, stop_after, tmp_path)
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    (error,) = [e for e in events_of(run_dir) if isinstance(e, Error)]
    assert code != 0 and error.kind == "config"
    assert error.message.startswith("the checkpoints of this run hold another network than its config now builds "
                                    "(method.rank = 16 then, 8 now): step-2 (")
    assert "damaged" not in error.message + error.hint and str(config) in error.hint
    config.write_text(text, encoding="utf-8")  # set back as the hint says: the run resumes
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0 and isinstance(events[-1], RunFinished) and events[-1].step == 4


def test_an_optimizer_switched_before_a_resume_is_named_not_a_crash(make_config, run_training, events_of,
                                                                     stop_after, tmp_path: Path) -> None:
    """A person switches training.optimizer from adamw to prodigy in the stopped run's config.toml and resumes:
    AdamW's state was loaded into Prodigy and the run crashed at its first step (KeyError, a traceback)."""
    import json

    from studio.core.runs.events import Error

    run_dir, config, text = stopped_and_edited(
        make_config(training=TrainingSection(batch_size=2, max_steps=4, seed=1)),
        'optimizer = "adamw"\n', 'optimizer = "prodigy"\n', run_training, events_of, stop_after, tmp_path)
    state_file = run_dir / "checkpoints" / "step-2" / "training_state.json"
    state = json.loads(state_file.read_text(encoding="utf-8"))
    for written_by in ("this studio", "an older studio"):  # the older one's checkpoint does not name its optimizer
        if written_by == "an older studio":
            state_file.write_text(json.dumps({k: v for k, v in state.items() if k != "optimizer"}), encoding="utf-8")
        code, _ = run_training(None, tmp_path, resume_dir=run_dir)
        error = [e for e in events_of(run_dir) if isinstance(e, Error)][-1]
        assert code != 0 and error.kind == "config", (written_by, error)
        assert error.message.endswith('was written with training.optimizer = "adamw"; this run\'s config says '
                                      '"prodigy": the optimizer\'s state cannot go on in another optimizer')
        assert 'set training.optimizer = "adamw" again in ' + str(config) in error.hint
    config.write_text(text, encoding="utf-8")
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0 and isinstance(events[-1], RunFinished) and events[-1].step == 4


def test_text_encoder_training_switched_on_before_a_resume_is_named_not_called_damage(
        make_config, run_training, events_of, stop_after, tmp_path: Path) -> None:
    """A person turns method.train_text_encoder on in a stopped LoRA run's config.toml and resumes: the checkpoint
    (the UNet's LoRA alone) was called damaged, "trainable_1.safetensors is missing", and the hint said to start
    a new run."""
    from studio.core.runs.events import Error

    run_dir, config, _ = stopped_and_edited(
        make_config(training=TrainingSection(batch_size=2, max_steps=4, seed=1)),
        "train_text_encoder = false\n", "train_text_encoder = true\n", run_training, events_of, stop_after, tmp_path)
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    (error,) = [e for e in events_of(run_dir) if isinstance(e, Error)]
    assert code != 0 and error.kind == "config"
    assert error.message == ("the checkpoints of this run hold another network than its config now builds "
                             "(method.train_text_encoder = false then, true now): step-2 (trainable_1.safetensors is "
                             "missing: its run trained 1 model, this run trains 2)")
    assert "damaged" not in error.hint and str(config) in error.hint


def test_an_alpha_edited_before_a_resume_is_said(make_config, run_training, events_of, stop_after,
                                                 tmp_path: Path) -> None:
    """A person halves method.alpha in the stopped run's config.toml and resumes: the weights still fit, so the
    run went on with every trained LoRA acting at half its strength from the first step on, without a word."""
    run_dir, config, _ = stopped_and_edited(
        make_config(method=MethodSection(kind="lora", rank=4, alpha=4.0),
                    training=TrainingSection(batch_size=2, max_steps=4, seed=1)),
        "alpha = 4.0\n", "alpha = 2.0\n", run_training, events_of, stop_after, tmp_path)
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0 and isinstance(events[-1], RunFinished) and events[-1].step == 4
    (warning,) = [e for e in events if isinstance(e, RunWarning) and "other method settings" in e.message]
    assert warning.message.startswith("the checkpoint of step 2 was written by a run of other method settings "
                                      "(method.alpha = 4.0 then, 2.0 now): it goes on with the new ones")
    assert str(config) in warning.hint
