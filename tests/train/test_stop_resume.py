"""STOP (or SIGTERM) mid-run, then resume: the same final weights as an uninterrupted run, with every
random draw in place (flip, caption dropout, LoRA dropout)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from safetensors.torch import load_file

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import ConceptSection, DatasetSection, MethodSection, TrainingSection
from studio.core.runs.events import Checkpoint, RunFinished, RunStarted, RunWarning, Step

torch = pytest.importorskip("torch")


def _config(make_config, demo_data: Path):
    return make_config(
        method=MethodSection(kind="lora", rank=4, dropout=0.1),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False,
                               flip=True, caption_dropout=0.2),
        training=TrainingSection(batch_size=2, max_steps=7, learning_rate=2e-3, seed=5,
                                 lr_scheduler="cosine", lr_warmup_steps=2, gradient_accumulation=1),
    )


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "output" / "pytorch_lora_weights.safetensors"))


@pytest.mark.parametrize("how", ["stop_file", "sigterm"])
def test_stop_then_resume_matches_an_uninterrupted_run(
    how: str, make_config, run_training, events_of, demo_data, tmp_path, monkeypatch
) -> None:
    from studio.train.loop import Trainer

    config = _config(make_config, demo_data)
    code, straight = run_training(config, tmp_path / "a")
    assert code == 0

    original = Trainer._after_step

    def stop_after_three(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == 3:
            if how == "stop_file":
                (self.run_dir / "STOP").write_text("stop", encoding="utf-8")
            else:
                signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(Trainer, "_after_step", stop_after_three)
    previous = signal.getsignal(signal.SIGTERM)
    code, run_dir = run_training(config, tmp_path / "b")
    assert signal.getsignal(signal.SIGTERM) == previous  # the trainer put the handler back
    events = events_of(run_dir)
    assert code == 0
    assert isinstance(events[-1], RunFinished) and events[-1].status == "stopped" and events[-1].step == 3
    assert events[-1].message == {"stop_file": "stopped on request (the Stop button, or a STOP file in the run folder)",
                                  "sigterm": "SIGTERM received"}[how]
    assert any(isinstance(e, Checkpoint) and e.step == 3 for e in events)
    assert not (run_dir / "output" / "pytorch_lora_weights.safetensors").exists()

    monkeypatch.setattr(Trainer, "_after_step", original)
    code, _ = run_training(config, tmp_path / "b", resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0
    assert [e.step for e in events if isinstance(e, Step)] == list(range(1, 8))
    assert [e.resumed_from_step for e in events if isinstance(e, RunStarted)] == [0, 3]
    assert not (run_dir / "STOP").exists()
    resumed, expected = _weights(run_dir), _weights(straight)
    assert resumed.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(resumed[key].float(), expected[key].float(), atol=1e-3, rtol=1e-3)
    # The weights did move, so equality above says something.
    straight_steps = [e for e in events_of(straight) if isinstance(e, Step)]
    resumed_steps = [e for e in events if isinstance(e, Step)]
    assert [round(e.loss, 4) for e in resumed_steps] == [round(e.loss, 4) for e in straight_steps]


def test_resume_without_a_checkpoint_starts_over(make_config, run_training, events_of, tmp_path) -> None:
    from studio.core.runs.launch import prepare_run

    # A run killed before its first checkpoint: the folder is prepared, nothing was saved.
    run_dir = prepare_run(resolve_paths(make_config(training=TrainingSection(batch_size=2, max_steps=2)), tmp_path)).run_dir
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0
    assert any(e.type == "warning" and "no complete checkpoint" in e.message for e in events)  # type: ignore[attr-defined]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == 2


def test_stop_then_resume_with_ema_is_bit_identical(make_config, run_training, events_of, demo_data, tmp_path,
                                                    monkeypatch) -> None:
    """With training.ema (updated every 2 steps, so the update count must survive the stop too), the
    stopped and resumed run writes the very bytes of the straight run: raw weights and their average."""
    from studio.train.loop import Trainer

    config = make_config(
        method=MethodSection(kind="lora", rank=4, dropout=0.1),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False, flip=True),
        training=TrainingSection(batch_size=2, max_steps=6, learning_rate=5e-3, seed=5, ema=True, ema_decay=0.8,
                                 ema_every=2),
        output={"dir": str(tmp_path / "runs"), "save_precision": "fp32", "formats": ["diffusers"]},
    )
    code, straight = run_training(config, tmp_path / "a")
    assert code == 0
    original = Trainer._after_step

    def stop_after_three(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == 3:
            (self.run_dir / "STOP").write_text("stop", encoding="utf-8")

    monkeypatch.setattr(Trainer, "_after_step", stop_after_three)
    code, run_dir = run_training(config, tmp_path / "b")
    assert code == 0 and events_of(run_dir)[-1].step == 3
    checkpoint = run_dir / "checkpoints" / "step-3"
    assert json.loads((checkpoint / "ema.json").read_text(encoding="utf-8"))["updates"] == 1
    monkeypatch.setattr(Trainer, "_after_step", original)
    code, _ = run_training(config, tmp_path / "b", resume_dir=run_dir)
    assert code == 0
    for name in ("pytorch_lora_weights.safetensors", "pytorch_lora_weights_ema.safetensors"):
        resumed = load_file(str(run_dir / "output" / name))
        expected = load_file(str(straight / "output" / name))
        assert resumed.keys() == expected.keys()
        assert all(torch.equal(resumed[k], expected[k]) for k in expected), name
    raw, averaged = _weights(straight), load_file(str(straight / "output" / "pytorch_lora_weights_ema.safetensors"))
    assert raw.keys() == averaged.keys()
    assert all(not torch.equal(raw[k], averaged[k]) for k in raw if k.endswith("lora_B.weight"))


def test_stop_pressed_while_a_resumed_run_loads_is_honoured(make_config, run_training, events_of, demo_data,
                                                            tmp_path, monkeypatch) -> None:
    """The leg before stopped at its STOP file; the resume was launched, and Stop pressed while the trainer
    imported and loaded: that Stop stops the resumed run at its first step, instead of being cleared with the
    leg before's."""
    import time

    from studio.core.runs.folders import LAUNCHED_ENV, request_stop
    from studio.train.loop import Trainer

    config = _config(make_config, demo_data)
    original = Trainer._after_step

    def stop_after_three(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == 3:
            request_stop(self.run_dir)

    monkeypatch.setattr(Trainer, "_after_step", stop_after_three)
    code, run_dir = run_training(config, tmp_path / "b")
    assert code == 0
    monkeypatch.setattr(Trainer, "_after_step", original)
    old = time.time() - 60
    os.utime(run_dir / "STOP", (old, old))  # the leg before's, a minute before the resume
    monkeypatch.setenv(LAUNCHED_ENV, repr(time.time() - 1.0))  # Resume pressed, then Stop a second later
    request_stop(run_dir)
    code, _ = run_training(config, tmp_path / "b", resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0
    assert isinstance(events[-1], RunFinished) and events[-1].status == "stopped" and events[-1].step == 3
    assert [e.step for e in events if isinstance(e, Step)] == [1, 2, 3]  # not one step more
    assert [e.step for e in events if isinstance(e, Checkpoint)] == [3]  # the checkpoint it resumed from, kept


def test_stop_pressed_while_a_checkpoint_saves_keeps_that_checkpoint(make_config, run_training, events_of,
                                                                     demo_data, tmp_path, monkeypatch) -> None:
    """Stop pressed while the checkpoint of step 3 is being saved: the run stops at 3 without saving that
    checkpoint a second time (which deleted the complete one first: a Kill meanwhile, here the second save
    ended as by a kill, left the run without it)."""
    from accelerate import Accelerator

    from studio.core.config.schema import OutputSection
    from studio.core.runs.folders import request_stop
    from studio.train.loop import Trainer
    from studio.train.saving.checkpoints import complete_checkpoints

    config = _config(make_config, demo_data).model_copy(
        update={"output": OutputSection(dir=str(tmp_path / "runs"), save_every_n_steps=3, keep_last=1)})
    saves: list[str] = []
    real_save = Accelerator.save_state

    def save_state(self: Accelerator, folder: str, *args: object, **kwargs: object) -> object:
        saves.append(folder)
        if len(saves) > 1:
            raise SystemExit("killed while saving")
        return real_save(self, folder, *args, **kwargs)

    original = Trainer._after_step

    def stop_during_the_save(self: Trainer, epoch: int) -> None:
        original(self, epoch)  # the checkpoint of step 3 is saved here
        if self.step == 3:
            request_stop(self.run_dir)

    monkeypatch.setattr(Accelerator, "save_state", save_state)
    monkeypatch.setattr(Trainer, "_after_step", stop_during_the_save)
    code, run_dir = run_training(config, tmp_path / "b")
    events = events_of(run_dir)
    assert code == 0 and isinstance(events[-1], RunFinished) and events[-1].status == "stopped"
    assert [step for step, _ in complete_checkpoints(run_dir)] == [3]
    assert len(saves) == 1


def test_stop_pressed_while_the_latents_are_cached_ends_the_run_there(make_config, run_training, events_of,
                                                                      demo_data, tmp_path, monkeypatch) -> None:
    """Stop pressed during the set-up (a large dataset's latents caching for minutes): the run ends at the next
    caching batch, with nothing trained and no checkpoint, instead of caching everything and training a step."""
    from studio.core.runs.folders import request_stop
    from studio.train.data.cache import LatentCache

    original = LatentCache.fill

    def stop_while_caching(self: LatentCache, *args: object, **kwargs: object) -> object:
        request_stop(run_dir_of[0])
        return original(self, *args, **kwargs)

    from studio.train.loop import Trainer

    run_dir_of: list[Path] = []
    setup = Trainer.setup
    monkeypatch.setattr(Trainer, "setup", lambda self: run_dir_of.append(self.run_dir) or setup(self))
    monkeypatch.setattr(LatentCache, "fill", stop_while_caching)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=4, seed=5, cache_latents=True))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 0
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "stopped" and finished.step == 0
    assert finished.message == "stopped on request during caching, before the first step"
    assert not [e for e in events if isinstance(e, Step | Checkpoint | RunStarted)]
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())


def test_max_steps_lowered_below_the_checkpoint_is_refused_before_the_model_loads(
        make_config, run_training, events_of, stop_after, tmp_path) -> None:
    """A run stopped at step 4, its config.toml then edited to max_steps = 3: the resume loaded the model,
    trained nothing and finished "completed" at step 4 (of 3) with a warning that it "goes on". A config error
    names both numbers and the edit; that edit then writes the LoRA of the checkpoint at once."""
    from studio.core.runs.events import Error, Phase

    stop_after(4)
    code, run_dir = run_training(make_config(), tmp_path)
    assert code == 0
    stop_after(None)
    config_file = run_dir / "config.toml"
    text = config_file.read_text(encoding="utf-8")
    assert "max_steps = 6\n" in text
    config_file.write_text(text.replace("max_steps = 6\n", "max_steps = 3\n"), encoding="utf-8")
    before = len(events_of(run_dir))
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    leg = events_of(run_dir)[before:]
    assert code != 0
    (error,) = [e for e in leg if isinstance(e, Error)]
    assert error.kind == "config"
    assert "training.max_steps = 3" in error.message and "already at step 4" in error.message
    assert f"set training.max_steps = 4 in {config_file}" in error.hint
    assert not any(isinstance(e, Phase) and e.message == "model loaded" for e in leg)
    assert isinstance(leg[-1], RunFinished) and leg[-1].status == "failed"
    assert not (run_dir / "output").exists()

    config_file.write_text(text.replace("max_steps = 6\n", "max_steps = 4\n"), encoding="utf-8")
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    events = events_of(run_dir)
    finished = events[-1]
    assert code == 0 and isinstance(finished, RunFinished) and finished.status == "completed" and finished.step == 4
    (said,) = [e for e in events if isinstance(e, RunWarning) and "checkpoint of step 4 was written" in e.message]
    assert said.message.endswith("this run has 4 steps: it writes the LoRA of step 4 at once, without training on")
    assert (run_dir / "output" / "pytorch_lora_weights.safetensors").is_file()


def test_epochs_lowered_below_the_checkpoint_is_refused(make_config, run_training, events_of, stop_after,
                                                        tmp_path) -> None:
    """The same with training.epochs (8 images in batches of 2: 4 steps an epoch): 2 epochs stopped at step 5,
    then 1 epoch asked."""
    from studio.core.runs.events import Error

    stop_after(5)
    code, run_dir = run_training(make_config(training=TrainingSection(batch_size=2, epochs=2, seed=1)), tmp_path)
    assert code == 0
    stop_after(None)
    config_file = run_dir / "config.toml"
    text = config_file.read_text(encoding="utf-8")
    assert "epochs = 2\n" in text
    config_file.write_text(text.replace("epochs = 2\n", "epochs = 1\n"), encoding="utf-8")
    code, _ = run_training(None, tmp_path, resume_dir=run_dir)
    assert code != 0
    (error,) = [e for e in events_of(run_dir) if isinstance(e, Error)]
    assert "training.epochs = 1 (4 steps)" in error.message and "already at step 5" in error.message
    assert not (run_dir / "output").exists()


def test_epochs_resumed_on_more_gpus_than_before_say_so(tmp_path: Path) -> None:
    """Epochs count steps of the launch's batches: a run of 2 epochs stopped at step 5 and resumed on twice the
    GPUs has 4 steps; the error says the batch grew, which the person did not edit in config.toml."""
    from studio.core.config.schema import TrainConfig
    from studio.train.errors import TrainError
    from studio.train.saving.resume import checkpoint_state, refuse_past_the_end

    folder = tmp_path / "checkpoints" / "step-5"
    folder.mkdir(parents=True)
    state = checkpoint_state(5, 1, 8, global_batch=2, accumulation=1, optimizer="adamw")
    (folder / "training_state.json").write_text(json.dumps(state), encoding="utf-8")
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "org/model"},
                                         "training": {"epochs": 2}})
    refuse_past_the_end(tmp_path, 8, config, global_batch=2)  # as many GPUs as before: nothing to say
    with pytest.raises(TrainError) as raised:
        refuse_past_the_end(tmp_path, 4, config, global_batch=4)
    assert raised.value.kind == "config"
    assert raised.value.message.startswith("this run's config says training.epochs = 2 (4 steps) of 4 images over "
                                           "all GPUs, where the run had 2 images, but its checkpoint ")
