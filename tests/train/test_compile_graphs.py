"""training.compile = "graphs": the whole denoiser compiled for CUDA graph replay, one graph per image size, each
training step marked as a new one so the graphs may reuse the last step's memory. What torch does with it on a
GPU is the GPU benchmark's to show (benchmarks/gpu_train_speed.py, path "studio compiled graphs"); here, what the
studio asks of torch."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


def test_graphs_compile_the_whole_denoiser_for_replay_with_static_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.train import compilation

    monkeypatch.setattr(compilation, "use_compile_cache", lambda: None)
    denoiser = torch.nn.Sequential(torch.nn.Linear(4, 4))
    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(denoiser, "compile", lambda **options: asked.append(options))
    compiled = compilation.compile_denoiser(denoiser, "graphs")
    assert asked == [{"dynamic": False, "mode": "reduce-overhead"}]
    assert compiled is not None and compiled.what == "the whole Sequential, replayed as CUDA graphs"


@pytest.mark.parametrize("mode, marks", [("graphs", 1), ("full", 0), ("blocks", 0), (None, 0)])
def test_each_step_is_marked_for_the_graphs_only(mode: str | None, marks: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.train import compilation

    calls: list[int] = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append(1))
    compilation.begin_step(None if mode is None else compilation.CompiledDenoiser(mode, "x"))
    assert len(calls) == marks


def test_the_setting_is_accepted_and_explained() -> None:
    from studio.core.config.schema import TrainingSection

    assert TrainingSection(compile="graphs").compile == "graphs"
    assert "CUDA graph" in (TrainingSection.model_fields["compile"].description or "")


def test_with_accumulation_each_backward_adds_into_gradient_buffers_of_their_own(
        make_config, run_training, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph's backward writes its gradients into the graphs' memory; were the first micro-batch's kept there as
    .grad, the next micro-batch would record graphs of its own instead of replaying its image size's. So with
    accumulation every micro-batch finds each trained parameter's .grad in one buffer for the whole run, zeroed at
    each step's start. (torch compiles nothing here: the compiled denoiser is the studio's record of it.)"""
    from studio.train import compilation, loop

    monkeypatch.setattr(loop, "compile_denoiser",
                        lambda denoiser, mode, family=None: compilation.CompiledDenoiser(mode, "the test's denoiser"))
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)
    seen: list[tuple[int, bool, list[int] | None]] = []  # (step, grads all zero, their buffers) at each micro-batch
    original = loop.Trainer._loss

    def observed(self: Any, *args: Any) -> Any:
        params = [p for group in self.trainable for p in group]
        grads = [p.grad for p in params]
        buffers = None if any(g is None for g in grads) else [g.data_ptr() for g in grads]
        seen.append((self.step, buffers is not None and all(not g.any() for g in grads), buffers))
        return original(self, *args)

    monkeypatch.setattr(loop.Trainer, "_loss", observed)
    config = make_config()
    config.training.compile = "graphs"
    config.training.gradient_accumulation = 2
    config.training.max_steps = 3
    code, _ = run_training(config, tmp_path / "run")
    assert code == 0
    assert [step for step, _, _ in seen] == [0, 0, 1, 1, 2, 2]
    assert all(buffers is not None for _, _, buffers in seen), "a micro-batch's backward met a parameter without .grad"
    assert len({tuple(buffers or ()) for _, _, buffers in seen}) == 1  # the same buffers all run long
    assert [zero for _, zero, _ in seen] == [True, False] * 3  # zeroed for each step, added into by each backward


def test_without_accumulation_or_graphs_the_gradients_are_freed_between_steps() -> None:
    from studio.train.compilation import CompiledDenoiser, keeps_grads

    assert not keeps_grads(CompiledDenoiser("graphs", "x"), 1)  # a step's one backward: nothing to keep apart
    assert not keeps_grads(CompiledDenoiser("full", "x"), 4)
    assert not keeps_grads(None, 4)
    assert keeps_grads(CompiledDenoiser("graphs", "x"), 2)


@pytest.mark.parametrize("mode", ["blocks", "graphs"])
def test_the_validation_loss_is_measured_eagerly(mode: str, make_config, run_training, tmp_path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Held-out images are measured in eval mode without gradients: compiled, every image size would compile
    the blocks (or the whole denoiser, and record its graphs) once more for a few images, unreported, as samples
    would; so they run eagerly, as samples do."""
    from torch._dynamo import eval_frame

    from studio.core.config.schema import TrainConfig
    from studio.train import compilation, loop
    from studio.train.extras.validation import ValidationLoss

    monkeypatch.setattr(loop, "compile_denoiser",
                        lambda denoiser, mode, family=None: compilation.CompiledDenoiser(mode, "the test's denoiser"))
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)
    stances: list[str] = []
    original = ValidationLoss.measure

    def observed(self: Any, step: int) -> Any:
        stances.append(eval_frame._stance.stance)
        return original(self, step)

    monkeypatch.setattr(ValidationLoss, "measure", observed)
    data = make_config().model_dump()
    data["dataset"]["validation_fraction"] = 0.25
    data["training"].update(max_steps=2, validation_every=1, compile=mode)
    code, _ = run_training(TrainConfig.model_validate(data), tmp_path / "run")
    assert code == 0
    assert stances == ["force_eager", "force_eager"]
